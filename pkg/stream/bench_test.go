package stream_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

// commitToDelivery commits one trigger-emitted event per trial and measures from just before
// COMMIT to the subscriber's call. commitOnly measures the bare insert+COMMIT baseline.
func commitToDelivery(tb testing.TB, pool *pgxpool.Pool, s *stream.Stream, trials int, commitOnly bool) []time.Duration {
	ctx := context.Background()
	type delivery struct {
		id int64
		at time.Time
	}
	delivered := make(chan delivery, 1024)
	if s != nil && !commitOnly {
		defer s.Subscribe(func(e stream.Event) {
			select {
			case delivered <- delivery{e.ID, time.Now()}:
			default: // never block the listener
			}
		})()
	}
	out := make([]time.Duration, 0, trials)
	for range trials {
		// Not timed: the id this trial's event must exceed (an earlier event may still be
		// in flight to the subscriber).
		before, err := stream.Head(ctx, pool)
		require.NoError(tb, err)
		tx, err := pool.Begin(ctx)
		require.NoError(tb, err)
		_, err = tx.Exec(ctx, `INSERT INTO item (name) VALUES ('bench')`)
		require.NoError(tb, err)
		start := time.Now()
		require.NoError(tb, tx.Commit(ctx))
		if commitOnly {
			out = append(out, time.Since(start))
			continue
		}
		timeout := time.After(10 * time.Second)
	wait:
		for {
			select {
			case d := <-delivered:
				if d.id > before {
					out = append(out, d.at.Sub(start))
					break wait
				}
			case <-timeout:
				tb.Fatal("event not delivered within 10s")
			}
		}
	}
	return out
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func latencySetup(tb testing.TB, pollOnly bool) (*pgxpool.Pool, *stream.Stream) {
	pool := pgtest.Pool(tb, newDB(tb))
	opts := stream.Options{PruneInterval: -1}
	if pollOnly {
		opts.PollInterval = 100 * time.Millisecond
	}
	s := stream.New(pool, opts)
	if pollOnly {
		stream.DisableListen(s)
	}
	startStream(tb, s)
	// Warm the pool and the plan cache.
	_ = commitToDelivery(tb, pool, s, 5, false)
	return pool, s
}

// BenchmarkCommitToDelivery reports commit-to-subscriber latency with NOTIFY against two
// baselines measured in the same run: the bare commit (the floor) and polling only (what a
// lost notification costs with PollInterval 100ms).
func BenchmarkCommitToDelivery(b *testing.B) {
	for _, bc := range []struct {
		name               string
		pollOnly, baseline bool
	}{
		{name: "commit-only", baseline: true},
		{name: "notify"},
		{name: "poll-100ms", pollOnly: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pool, s := latencySetup(b, bc.pollOnly)
			b.ResetTimer()
			ds := commitToDelivery(b, pool, s, b.N, bc.baseline)
			b.StopTimer()
			b.ReportMetric(float64(percentile(ds, 0.50).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(ds, 0.99).Microseconds()), "p99-µs")
		})
	}
}

// TestCommitToDeliveryLatency is the 200-trial measurement behind the benchmark, run with
// the tests so a regression shows (generous bound: CI machines are noisy).
func TestCommitToDeliveryLatency(t *testing.T) {
	leakCheck(t)
	pool, s := latencySetup(t, false)
	base := commitToDelivery(t, pool, s, 200, true)
	ds := commitToDelivery(t, pool, s, 200, false)
	p50, p99 := percentile(ds, 0.50), percentile(ds, 0.99)
	t.Logf("commit->delivery over %d trials: p50 %v p99 %v (bare commit: p50 %v p99 %v)",
		len(ds), p50, p99, percentile(base, 0.50), percentile(base, 0.99))
	require.Less(t, p99, time.Second, "NOTIFY path must beat the 1s poll")
}
