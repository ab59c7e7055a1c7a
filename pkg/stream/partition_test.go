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

func outboxPartitions(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'stream_outbox'::regclass ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// The outbox is pruned by whole partitions at the time of a clock the test moves: nothing
// before the retention has passed over a partition's range, then exactly the expired ones,
// with pruned_through at their highest id, so a consumer resuming from a dropped id is told
// to resync and one at the head is not.
func TestPruneDropsExpiredPartitionsByClock(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	var now time.Time
	clock := func() time.Time { return now }
	s := stream.New(pool, stream.Options{PruneInterval: -1, Retention: 24 * time.Hour, Clock: clock})
	for range 5 {
		insertItem(t, pool, "old")
	}
	head, err := stream.Latest(ctx, pool)
	require.NoError(t, err)

	now = time.Now()
	n, err := s.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing expired")
	now = time.Now().Add(30 * time.Hour) // the first partition ended at most 24 h from now
	n, err = s.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the partition of the rows ended less than 24 h before the clock")
	before := outboxPartitions(t, pool)
	require.Greater(t, len(before), 3, "partitions are made ahead of the clock: %v", before)

	now = time.Now().Add(49 * time.Hour)
	n, err = s.Prune(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one partition, the rows', is dropped")
	after := outboxPartitions(t, pool)
	require.Equal(t, "stream_outbox_default", before[0])
	require.NotContains(t, after, before[1])
	require.Contains(t, after, "stream_outbox_default")
	var pruned, left int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pruned_through, (SELECT count(*) FROM stream_outbox) FROM stream_state`).Scan(&pruned, &left))
	require.Equal(t, head, pruned)
	require.Zero(t, left)

	err = s.Watch(ctx, 2, nil, func(*stream.Event, int64) error { return nil })
	re, ok := stream.AsResync(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, head, re.OldestID)

	// Writes still land (in the default partition: the clock is ahead of the real time), are
	// delivered after the head, and a consumer at the head is not told to resync.
	insertItem(t, pool, "new")
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var got []int64
	err = s.Watch(wctx, head, nil, func(e *stream.Event, _ int64) error {
		if e != nil {
			got = append(got, e.ID)
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []int64{head + 1}, got)

	// The default partition is pruned row by row once its rows expire.
	now = time.Now().Add(25 * time.Hour)
	n, err = s.Prune(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT pruned_through FROM stream_state`).Scan(&pruned))
	require.Equal(t, head+1, pruned)
}

// An outbox of version 1 with rows becomes partitioned in place: the rows stay (in the legacy
// partition) and are delivered, ids continue after them, a second upgrade changes nothing,
// and the legacy partition is dropped like any other once expired.
func TestUpgradePartitionsAnExistingOutbox(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := newV1DB(t, "stream_v1rows", `
		INSERT INTO item (name) SELECT 'v1-' || g FROM generate_series(1, 100) g;
		DELETE FROM item WHERE id > 90;`)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, stream.Upgrade(ctx, conn))
	var kind string
	require.NoError(t, conn.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'stream_outbox'::regclass`).Scan(&kind))
	require.Equal(t, "p", kind)
	parts := outboxPartitions(t, conn)
	require.NoError(t, stream.Upgrade(ctx, conn), "the upgrade is idempotent")
	require.Equal(t, parts, outboxPartitions(t, conn))
	require.Contains(t, parts, "stream_outbox_legacy")
	var legacy int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM stream_outbox_legacy`).Scan(&legacy))
	require.Equal(t, 110, legacy, "100 inserts and 10 deletes, kept")

	pool := pgtest.Pool(t, dsn)
	insertItem(t, pool, "after")
	latest, err := stream.Latest(ctx, pool)
	require.NoError(t, err)
	require.EqualValues(t, 111, latest, "ids continue after the old ones")
	var all []int64
	err = stream.New(pool, stream.Options{}).Watch(ctx, 0, nil, func(e *stream.Event, _ int64) error {
		if e != nil {
			all = append(all, e.ID)
			if e.ID == latest {
				return context.Canceled
			}
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, all, 111)
	requireStrictlyIncreasing(t, all)

	s := stream.New(pool, stream.Options{PruneInterval: -1, Retention: time.Hour,
		Clock: func() time.Time { return time.Now().Add(3 * time.Hour) }})
	n, err := s.Prune(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the legacy partition (up to the next hour) is dropped")
	require.NotContains(t, outboxPartitions(t, pool), "stream_outbox_legacy")
	var pruned int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pruned_through FROM stream_state`).Scan(&pruned))
	require.Equal(t, latest, pruned)
}
