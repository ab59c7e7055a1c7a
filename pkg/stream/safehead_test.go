package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

// A transaction that holds an xid holds back delivery (and Head) of every event drawn after
// it began, until it ends: it might still commit an event with a lower id.
func TestLongTransactionHoldsBackDelivery(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := newPool(t, newDB(t))
	s := stream.New(pool, stream.Options{PollInterval: 50 * time.Millisecond})
	var got collector
	defer s.Subscribe(got.add)()
	startStream(t, s)

	long, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer long.Rollback(ctx)
	_, err = long.Exec(ctx, `INSERT INTO item (name) VALUES ('long')`) // draws its id at COMMIT
	require.NoError(t, err)

	insertItem(t, pool, "quick")
	latest, err := stream.Latest(ctx, pool)
	require.NoError(t, err)
	head, err := stream.Head(ctx, pool)
	require.NoError(t, err)
	require.Less(t, head, latest, "the quick event is visible but not safe while the long transaction runs")
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, got.events(), "nothing is delivered past an open writer")

	require.NoError(t, long.Commit(ctx))
	waitHead(t, s, pool)
	require.Equal(t, outboxIDs(t, pool), ids(got.events()))
	require.Len(t, got.events(), 2)
}

// A database migrated with version 1 of the stream schema (the global lock) is upgraded in
// place: its rows stay deliverable and new events are ordered by the new rule.
func TestUpgradeFromVersion1(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := pgtest.NewDatabase(t, "stream_v1", func(ctx context.Context, dsn string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, stream.SchemaSQL+`
			CREATE TABLE item (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL);
			CREATE TRIGGER item_stream AFTER INSERT OR UPDATE OR DELETE ON item
			    FOR EACH ROW EXECUTE FUNCTION stream_emit('item', '', 'id', 'name');
			INSERT INTO item (name) VALUES ('before');`)
		return err
	})
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var src string
	require.NoError(t, conn.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'stream_append'`).Scan(&src))
	require.Contains(t, src, "pg_advisory_xact_lock", "the template is version 1")

	require.NoError(t, stream.Upgrade(ctx, conn))
	require.NoError(t, stream.Upgrade(ctx, conn), "the upgrade is idempotent")
	require.NoError(t, conn.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'stream_append'`).Scan(&src))
	require.NotContains(t, src, "pg_advisory_xact_lock(")

	pool := newPool(t, dsn)
	zero := int64(0)
	s := stream.New(pool, stream.Options{StartAfter: &zero})
	var got collector
	defer s.Subscribe(got.add)()
	startStream(t, s)
	writeConcurrently(t, pool, 4, 20)
	waitHead(t, s, pool)
	delivered := ids(got.events())
	requireStrictlyIncreasing(t, delivered)
	require.Equal(t, outboxIDs(t, pool), delivered)
	require.Equal(t, int64(1), delivered[0], "the row written under version 1 is delivered too")
}
