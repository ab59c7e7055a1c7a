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

// An open transaction that has not reached COMMIT holds back nothing: its events draw their
// ids at COMMIT, so a reader need not wait for it (nor for a transaction in another database).
// This is what lets policy's seat check wait for billing to see policy's earlier events while
// its own write is open.
func TestOpenTransactionHoldsBackNothing(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{PollInterval: time.Minute})
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
	require.Equal(t, latest, head, "the quick event is safe at once")
	require.Eventually(t, func() bool { return len(got.events()) == 1 }, 5*time.Second, 5*time.Millisecond,
		"delivered while the long transaction is open (by its notification, not a poll)")

	require.NoError(t, long.Commit(ctx))
	waitHead(t, s, pool)
	require.Equal(t, outboxIDs(t, pool), ids(got.events()))
	require.Len(t, got.events(), 2)
}

// A transaction that has drawn an id (Append, or a trigger event at COMMIT) holds back the
// safe head until it ends: it might still commit that id below ids committed meanwhile.
func TestDrawnIDHoldsBackHead(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t, newDB(t))
	before, err := stream.Head(ctx, pool)
	require.NoError(t, err)

	drew, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer drew.Rollback(ctx)
	id, err := stream.Append(ctx, drew, stream.Event{Kind: "item", Op: "insert"})
	require.NoError(t, err)

	heads := make(chan int64, 1)
	go func() {
		h, err := stream.Head(ctx, pool)
		if err != nil {
			h = -1
		}
		heads <- h
	}()
	select {
	case h := <-heads:
		t.Fatalf("Head answered %d (before %d) while id %d was drawn and not committed", h, before, id)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, drew.Commit(ctx))
	select {
	case h := <-heads:
		require.GreaterOrEqual(t, h, id, "the committed id is safe once its transaction ended")
	case <-time.After(5 * time.Second):
		t.Fatal("Head still waiting after the commit")
	}
}

// A database migrated with version 1 of the stream schema (the global lock) is upgraded in
// place: its rows stay deliverable and new events are ordered by the new rule.
func TestUpgradeFromVersion1(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := newV1DB(t, "stream_v1", `
		INSERT INTO item (name) VALUES ('before');`)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var src string
	require.NoError(t, conn.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'stream_append'`).Scan(&src))
	require.Contains(t, src, "pg_advisory_xact_lock", "the template is version 1")

	require.NoError(t, stream.Upgrade(ctx, conn))
	require.NoError(t, stream.Upgrade(ctx, conn), "the upgrade is idempotent")
	require.NoError(t, conn.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'stream_append'`).Scan(&src))
	require.Contains(t, src, "pg_advisory_xact_lock_shared(", "writers take the lock shared")

	pool := pgtest.Pool(t, dsn)
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
