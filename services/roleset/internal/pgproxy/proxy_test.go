package pgproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
)

func TestLogin(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	conn := f.connect(t, "disable")
	var user string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_user`).Scan(&user))
	require.Equal(t, f.login, user, "the session runs as the upstream login")
	require.NotZero(t, conn.PgConn().PID())

	cases := []struct{ name, user, password string }{
		{"wrong password", testUser, "not-the-ticket"},
		{"unknown user", "t_nobody", testPassword},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pgx.Connect(ctx, f.dsn(tc.user, tc.password, "disable"))
			require.Error(t, err)
			require.Equal(t, "28P01", pgCode(err), err.Error())
			require.Contains(t, err.Error(), `password authentication failed for user "`+tc.user+`"`)
		})
	}
	st := f.srv.Stats()
	require.Equal(t, map[string]uint64{"28P01": 2}, st.Refusals, "each refusal counted by its SQLSTATE")
	require.Equal(t, 1, st.Connections, "the one session still open")
}

func TestTLS(t *testing.T) {
	f := newFixture(t, Config{TLS: selfSignedTLS(t)})
	conn := f.connect(t, "require")
	_, isTLS := conn.PgConn().Conn().(*tls.Conn)
	require.True(t, isTLS, "sslmode=require gets TLS")
	var one int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT 1`).Scan(&one))
	require.Equal(t, 1, one)

	t.Run("no TLS configured refuses sslmode=require", func(t *testing.T) {
		plain := newFixture(t, Config{})
		_, err := pgx.Connect(context.Background(), plain.dsn(testUser, testPassword, "require"))
		require.Error(t, err)
	})
}

func TestPsql(t *testing.T) {
	psql := pgtest.Binary(t, "psql")
	cases := []struct {
		name    string
		cfg     Config
		sslmode string
	}{
		{"plain", Config{}, "prefer"},
		{"TLS", Config{TLS: selfSignedTLS(t)}, "require"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg)
			cmd := exec.Command(psql, "-X", "-tA", "-c", "SELECT 1", f.dsn(testUser, "", tc.sslmode))
			cmd.Env = append(os.Environ(), "PGPASSWORD="+testPassword)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			require.Equal(t, "1", strings.TrimSpace(string(out)))
		})
	}
}

func TestCancel(t *testing.T) {
	f := newFixture(t, Config{})
	conn := f.connect(t, "disable")
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = conn.PgConn().CancelRequest(context.Background())
	}()
	start := time.Now()
	_, err := conn.Exec(context.Background(), `SELECT pg_sleep(30)`)
	require.Error(t, err)
	require.Equal(t, "57014", pgCode(err), err.Error())
	require.Less(t, time.Since(start), 5*time.Second)

	t.Run("an unknown key is dropped", func(t *testing.T) {
		other := f.connect(t, "disable")
		// A key the proxy never issued: the request must not reach any backend.
		other.PgConn().SecretKey()[0] ^= 0xff
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = other.PgConn().CancelRequest(context.Background())
		}()
		_, err := other.Exec(context.Background(), `SELECT pg_sleep(0.5)`)
		require.NoError(t, err)
	})
}

// sessionLog is an OnSession that keeps what it is told, and refuses granted starts while
// fail is set (a caller whose audit trail cannot be written and fails closed).
type sessionLog struct {
	mu     sync.Mutex
	events []SessionEvent
	fail   bool
}

func (l *sessionLog) on(e SessionEvent) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	if l.fail && !e.End && e.Code == "" {
		return errors.New("trail down")
	}
	return nil
}

func (l *sessionLog) all() []SessionEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]SessionEvent(nil), l.events...)
}

func (l *sessionLog) setFail(v bool) { l.mu.Lock(); l.fail = v; l.mu.Unlock() }

// OnSession is told each start (granted, or refused with the SQLSTATE the client got) and
// each granted session's end with why; an error on a granted start refuses the session.
func TestOnSession(t *testing.T) {
	log := &sessionLog{}
	f := newFixture(t, Config{OnSession: log.on})
	bind := Binding{TicketID: testUser, JobID: "job-1", DataTable: "sales", Login: f.login}
	start := SessionEvent{User: testUser, Database: "postgres", Bind: bind}
	ctx := context.Background()
	waitFor := func(t *testing.T, want ...SessionEvent) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, want, log.all()) }, 5*time.Second, 10*time.Millisecond)
	}

	conn := f.connect(t, "disable")
	require.NoError(t, conn.Close(ctx))
	end := start
	end.End, end.Why = true, EndClient
	waitFor(t, start, end)

	_, err := pgx.Connect(ctx, f.dsn(testUser, "not-the-ticket", "disable"))
	require.Equal(t, "28P01", pgCode(err))
	refused := start
	refused.Code = "28P01"
	_, err = pgx.Connect(ctx, f.dsn("t_nobody", testPassword, "disable"))
	require.Equal(t, "28P01", pgCode(err))
	waitFor(t, start, end, refused, SessionEvent{User: "t_nobody", Database: "postgres", Code: "28P01"})

	conn = f.connect(t, "disable")
	require.Equal(t, 1, f.srv.CloseSessions(func(b Binding) bool { return b.TicketID == testUser }))
	revoked := start
	revoked.End, revoked.Why = true, EndClosed
	waitFor(t, start, end, refused, SessionEvent{User: "t_nobody", Database: "postgres", Code: "28P01"}, start, revoked)
	_ = conn.Close(ctx)

	log.setFail(true)
	_, err = pgx.Connect(ctx, f.dsn(testUser, testPassword, "disable"))
	require.Equal(t, "57P03", pgCode(err), "a session that cannot be recorded is refused when the caller says so")
	unrecorded := start
	unrecorded.Code = "57P03"
	waitFor(t, start, end, refused, SessionEvent{User: "t_nobody", Database: "postgres", Code: "28P01"}, start, revoked, start, unrecorded)
}
