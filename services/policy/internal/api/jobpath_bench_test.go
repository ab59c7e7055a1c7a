package api_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/health/grpc_health_v1"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// TestJobPathBench is the job-path benchmark behind docs/benchmarks.md (issue 12): units of one
// RecordRun (a direct run, alice's user token as the credential) followed by one FinishRun,
// both over gRPC with the service token against real policy servers, at each caller count;
// and, in the same run on the same Postgres, the baseline: a bare INSERT transaction then an
// UPDATE transaction on a scratch table, with one connection per caller. It prints runs/s and
// the p50 of a unit for both, and their ratio; and the floor, the baseline plus two gRPC round
// trips, the least that two calls per job can cost. It is skipped unless JOBPATH_BENCH=1
// (`make bench-jobpath`), because it loads the machine for a while.
//
// Knobs (environment): JOBPATH_CALLERS (default "1,64"), JOBPATH_REPLICAS (policy servers on
// the one database, callers spread over them round robin; default "1"), JOBPATH_SECONDS per
// measurement (default 3), JOBPATH_ROUNDS (default 3; the medians are reported),
// JOBPATH_DATABASE_URL (a server to create a scratch database on; default the test cluster,
// which runs with fsync and synchronous_commit off, so commits cost nothing there and the
// ratios are far from those of a durable server).
func TestJobPathBench(t *testing.T) {
	if os.Getenv("JOBPATH_BENCH") != "1" {
		t.Skip("set JOBPATH_BENCH=1 (make bench-jobpath) to run the job-path benchmark")
	}
	callers := envInts(t, "JOBPATH_CALLERS", "1,64")
	replicaCounts := envInts(t, "JOBPATH_REPLICAS", "1")
	secs := envInts(t, "JOBPATH_SECONDS", "3")[0]
	rounds := envInts(t, "JOBPATH_ROUNDS", "3")[0]
	dur := time.Duration(secs) * time.Second

	dsn := benchDSN(t)
	maxReplicas := slices.Max(replicaCounts)
	reps := make([]*replica, maxReplicas)
	for i := range reps {
		reps[i] = startReplica(t, dsn)
	}
	workspaceWith(t, reps[0], "bench")
	member(t, reps[0], "bench", "alice", policyv1.Role_ROLE_OPERATOR)
	alice := userToken(t, reps[0], "bench", "alice")

	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pcfg.MaxConns = int32(slices.Max(callers))
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE bench_scratch (id bigint PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz)`)
	require.NoError(t, err)

	var seq atomic.Int64
	baseline := func(ctx context.Context, _ int) error {
		id := seq.Add(1)
		if _, err := pool.Exec(ctx, `INSERT INTO bench_scratch (id) VALUES ($1)`, id); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `UPDATE bench_scratch SET finished_at = now() WHERE id = $1`, id)
		return err
	}
	// The floor: the baseline plus two gRPC round trips to a policy server (health checks:
	// no database), what any design with one RecordRun and one FinishRun call pays at least.
	floor := func(n int) func(ctx context.Context, caller int) error {
		return func(ctx context.Context, caller int) error {
			h := grpc_health_v1.NewHealthClient(reps[caller%n].conn)
			for range 2 {
				if _, err := h.Check(ctx, &grpc_health_v1.HealthCheckRequest{}); err != nil {
					return err
				}
			}
			return baseline(ctx, caller)
		}
	}
	jobpath := func(n int) func(ctx context.Context, caller int) error {
		return func(ctx context.Context, caller int) error {
			r := reps[caller%n]
			id := seq.Add(1)
			job := fmt.Sprintf("00000000-0000-4000-8000-%012x", id)
			_, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "bench", JobId: job,
				PermissionedAs: "u/alice", Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: alice})
			if err != nil {
				return err
			}
			_, err = r.run.FinishRun(service, &policyv1.FinishRunRequest{Workspace: "bench", JobId: job})
			return err
		}
	}
	// Warm every path (prepared statements, connections) once.
	for _, c := range callers {
		measure(t, c, 300*time.Millisecond, baseline)
		measure(t, c, 300*time.Millisecond, jobpath(maxReplicas))
		measure(t, c, 300*time.Millisecond, floor(maxReplicas))
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\njob path: %d round(s) of %s each, medians\n", rounds, dur)
	fmt.Fprintf(&out, "| replicas | callers | record + finish | bare insert + update | ratio runs/s | ratio p50 | floor: bare + 2 gRPC calls | floor ratio p50 |\n")
	fmt.Fprintf(&out, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, n := range replicaCounts {
		for _, c := range callers {
			var jr, br, fr []result
			for range rounds {
				br = append(br, measure(t, c, dur, baseline))
				jr = append(jr, measure(t, c, dur, jobpath(n)))
				fr = append(fr, measure(t, c, dur, floor(n)))
			}
			j, b, f := medianOf(jr), medianOf(br), medianOf(fr)
			fmt.Fprintf(&out, "| %d | %d | %.0f runs/s, p50 %.2f ms | %.0f /s, p50 %.2f ms | %.2fx | %.2fx | %.0f /s, p50 %.2f ms | %.2fx |\n",
				n, c, j.rate, ms(j.p50), b.rate, ms(b.p50), j.rate/b.rate, float64(j.p50)/float64(b.p50),
				f.rate, ms(f.p50), float64(f.p50)/float64(b.p50))
			for i := range jr {
				t.Logf("replicas=%d callers=%d round %d: job path %.0f/s p50 %.2f ms; baseline %.0f/s p50 %.2f ms; floor %.0f/s p50 %.2f ms",
					n, c, i+1, jr[i].rate, ms(jr[i].p50), br[i].rate, ms(br[i].p50), fr[i].rate, ms(fr[i].p50))
			}
		}
	}
	t.Log(out.String())
}

type result struct {
	rate float64
	p50  time.Duration
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// medianOf takes the median rate and the median p50 (each on its own).
func medianOf(rs []result) result {
	rates := make([]float64, len(rs))
	p50s := make([]time.Duration, len(rs))
	for i, r := range rs {
		rates[i], p50s[i] = r.rate, r.p50
	}
	slices.Sort(rates)
	slices.Sort(p50s)
	return result{rate: rates[len(rs)/2], p50: p50s[len(rs)/2]}
}

// measure runs unit from callers goroutines for d and returns units/s and the median latency.
func measure(t *testing.T, callers int, d time.Duration, unit func(ctx context.Context, caller int) error) result {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(d)
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := unit(ctx, c); err != nil {
					failed.Store(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, ok := failed.Load().(error); ok {
		t.Fatalf("unit failed: %v", err)
	}
	all := slices.Concat(lat...)
	if len(all) == 0 {
		t.Fatal("no unit completed")
	}
	slices.Sort(all)
	return result{rate: float64(len(all)) / elapsed.Seconds(), p50: all[len(all)/2]}
}

func envInts(t *testing.T, name, def string) []int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(t, err, "%s=%q", name, v)
		require.Positive(t, n, "%s=%q", name, v)
		out = append(out, n)
	}
	return out
}

// benchDSN is a new migrated database: on JOBPATH_DATABASE_URL's server if set (dropped at the
// end), else on the test cluster.
func benchDSN(t *testing.T) string {
	t.Helper()
	base := os.Getenv("JOBPATH_DATABASE_URL")
	if base == "" {
		return testdb.DSN(t)
	}
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(base)
	require.NoError(t, err)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	name := fmt.Sprintf("jobpath_bench_%d", time.Now().UnixNano())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
	})
	cfg.Database = name
	dsn := fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", url.PathEscape(cfg.User), url.PathEscape(cfg.Password), cfg.Host, cfg.Port, name)
	require.NoError(t, testdb.Migrate(ctx, dsn))
	return dsn
}
