package pgproxy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
