package pgproxy

import (
	"context"
	"crypto/tls"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
