package stream_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testSQL is a service-like migration: tables with stream triggers as the services attach
// them, and the tables of a durable test consumer (no triggers).
const testSQL = `-- +goose Up
CREATE TABLE member (
    workspace_id text    NOT NULL,
    username     text    NOT NULL,
    role         text    NOT NULL,
    disabled     boolean NOT NULL DEFAULT false,
    secret       text,
    PRIMARY KEY (workspace_id, username)
);
CREATE TRIGGER member_stream AFTER INSERT OR UPDATE OR DELETE ON member
    FOR EACH ROW EXECUTE FUNCTION stream_emit('member', 'workspace_id', 'username', 'role', 'disabled');

CREATE TABLE item (
    id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL
);
CREATE TRIGGER item_stream AFTER INSERT OR UPDATE OR DELETE ON item
    FOR EACH ROW EXECUTE FUNCTION stream_emit('item', '', 'id', 'name');

CREATE TABLE consumer (name text PRIMARY KEY, last_id bigint NOT NULL);
CREATE TABLE applied (consumer text NOT NULL, event_id bigint NOT NULL, kind text NOT NULL);
`

var migrator = pgtest.Migrations(fstest.MapFS{"00002_test.sql": {Data: []byte(testSQL)}})

// newDB returns a fresh migrated database.
func newDB(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabase(t, "stream_test", migrator)
}

// newV1DB returns a fresh database as version 1 of the stream schema left it (SchemaSQL, not
// the migrations, which upgrade): the item table with its stream trigger, then rows written
// under version 1 (the SQL in rows), for the upgrade tests.
func newV1DB(t testing.TB, name, rows string) string {
	t.Helper()
	return pgtest.NewDatabase(t, name, func(ctx context.Context, dsn string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, stream.SchemaSQL+`
			CREATE TABLE item (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL);
			CREATE TRIGGER item_stream AFTER INSERT OR UPDATE OR DELETE ON item
			    FOR EACH ROW EXECUTE FUNCTION stream_emit('item', '', 'id', 'name');
`+rows)
		return err
	})
}

// leakCheck must be called first in a test: its cleanup then runs last, after pools and
// streams are closed.
func leakCheck(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// startStream runs s until the test ends and waits until it is ready.
func startStream(t testing.TB, s *stream.Stream) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("stream not ready after 10s")
	}
}

// collector records what a subscriber receives.
type collector struct {
	mu  sync.Mutex
	evs []stream.Event
}

func (c *collector) add(e stream.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
}

func (c *collector) events() []stream.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]stream.Event(nil), c.evs...)
}

func ids(evs []stream.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// outboxIDs returns every id in the outbox, in order.
func outboxIDs(t testing.TB, q *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT id FROM stream_outbox ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return out
}

func requireStrictlyIncreasing(t testing.TB, xs []int64) {
	t.Helper()
	for i := 1; i < len(xs); i++ {
		require.Greater(t, xs[i], xs[i-1], "ids out of order or duplicated at index %d", i)
	}
}

func waitHead(t testing.TB, s *stream.Stream, pool *pgxpool.Pool) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := stream.Head(ctx, pool)
	require.NoError(t, err)
	require.NoError(t, s.WaitFor(ctx, h), "stream did not reach head %d (at %d)", h, s.Position())
	return h
}

// twoDaysAhead is a Prune clock past every partition made so far.
func twoDaysAhead() time.Time { return time.Now().Add(48 * time.Hour) }

func insertItem(t testing.TB, pool *pgxpool.Pool, name string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO item (name) VALUES ($1)`, name)
	require.NoError(t, err)
}

func dbName(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	return cfg.Database
}

func mustParse(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}
