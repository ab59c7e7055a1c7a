package store_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// BenchmarkRunPathPartitions measures what partitions cost the job path: the token lookup by
// digest and the run lookup by job id probe one index per retained partition, and the planner
// (every statement is planned for its arguments, as internal/app configures the pool) opens
// every one (it cannot prune by digest or job id). Cases: a fresh database (2 partitions), 21
// days back to now in weeks (6; the service keeps 4) and in days (23). Run with
// -benchtime=500x; BENCH_PLAN_MODE=force_generic_plan plans each statement once instead.
// docs/policy.md ("Retention") has the figures, and the unpartitioned baseline (the "fresh"
// case with migrations/00007 moved away).
func BenchmarkRunPathPartitions(b *testing.B) {
	for _, tc := range []struct {
		name     string
		width    int
		pastDays int
	}{{"fresh", 7, 0}, {"weeks", 7, 21}, {"days", 1, 21}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			// As the service runs it (internal/app): every statement planned for its arguments.
			cfg, err := pgxpool.ParseConfig(testdb.DSN(b))
			require.NoError(b, err)
			cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = planMode()
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(b, err)
			defer pool.Close()
			s := store.New(pool)
			newWorkspace(b, s, "w", "W")
			if tc.pastDays > 0 {
				_, err = s.Maintain(ctx, time.Now().Add(-time.Duration(tc.pastDays)*day),
					store.Retention{Runs: 30 * day, Tokens: day, PartitionDays: tc.width, Ahead: time.Duration(tc.pastDays) * day})
				require.NoError(b, err)
			}
			var n int
			var row int
			require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'run'::regclass`).Scan(&n))
			b.Logf("run partitions: %d", n)
			record := func() (string, []byte) {
				job := newJobID()
				_, digest := rulebook.NewSecret(rulebook.PrefixJob)
				_, err := s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: job, PermissionedAs: "u/admin", Origin: rulebook.OriginSchedule,
					TokenID: rulebook.NewTokenID(), TokenDigest: digest, ExpiresAt: time.Now().Add(day)})
				require.NoError(b, err)
				return job, digest
			}
			digests := make([][]byte, 0, 2000)
			for range 2000 {
				_, d := record()
				digests = append(digests, d)
			}
			// As autovacuum would have by then: the planner knows the partitions' sizes.
			_, err = pool.Exec(ctx, `ANALYZE run; ANALYZE token`)
			require.NoError(b, err)
			// The server's own account of the token lookup, less noisy than the round trip on
			// a shared machine: median planning and execution time of 50 runs, and the
			// buffers planning touched (deterministic).
			b.Run("AuthenticateExplain", func(b *testing.B) {
				conn, err := pool.Acquire(ctx)
				require.NoError(b, err)
				defer conn.Release()
				var plan, exec []float64
				var planBuffers float64
				for b.Loop() {
					for i := range 50 {
						var out []map[string]any
						require.NoError(b, conn.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, SUMMARY, FORMAT JSON) `+store.AuthenticateSQL,
							digests[i]).Scan(&out))
						plan = append(plan, out[0]["Planning Time"].(float64))
						exec = append(exec, out[0]["Execution Time"].(float64))
						if p, ok := out[0]["Planning"].(map[string]any); ok {
							planBuffers = p["Shared Hit Blocks"].(float64)
						}
					}
				}
				b.ReportMetric(median(plan)*1000, "plan-µs")
				b.ReportMetric(median(exec)*1000, "exec-µs")
				b.ReportMetric(planBuffers, "plan-buffers")
			})
			// The same with one generic plan per connection (PREPARE once, then EXECUTE): what
			// the lookup costs when it is not planned for each call.
			b.Run("AuthenticateGenericExplain", func(b *testing.B) {
				conn, err := pool.Acquire(ctx)
				require.NoError(b, err)
				defer conn.Release()
				_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan; PREPARE auth(bytea) AS `+store.AuthenticateSQL)
				require.NoError(b, err)
				defer conn.Exec(ctx, `DEALLOCATE auth; RESET plan_cache_mode`) //nolint:errcheck
				var plan, exec []float64
				for b.Loop() {
					for i := range 50 {
						var out []map[string]any
						// EXECUTE's parameters are not bind parameters of the EXPLAIN: a literal.
						require.NoError(b, conn.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) EXECUTE auth('\\x%x')`,
							digests[i])).Scan(&out))
						plan = append(plan, out[0]["Planning Time"].(float64))
						exec = append(exec, out[0]["Execution Time"].(float64))
					}
				}
				b.ReportMetric(median(plan)*1000, "plan-µs")
				b.ReportMetric(median(exec)*1000, "exec-µs")
			})
			b.Run("RecordRun", func(b *testing.B) {
				for b.Loop() {
					record()
				}
			})
			b.Run("Authenticate", func(b *testing.B) {
				for b.Loop() {
					_, err := s.Authenticate(ctx, digests[row%len(digests)])
					require.NoError(b, err)
					row++
				}
			})
			b.Run("RecordRun+FinishRun", func(b *testing.B) {
				for b.Loop() {
					job, _ := record()
					require.NoError(b, s.FinishRun(ctx, "w", job))
				}
			})
		})
	}
}

func planMode() string {
	if m := os.Getenv("BENCH_PLAN_MODE"); m != "" {
		return m
	}
	return "force_custom_plan"
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
