package itest

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/faultnet"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// Target cluster faults (issue 16, item 3; docs/reliability.md): a faultnet proxy between
// roleset and the target cluster (the cluster is registered at the proxy's address), and for
// each fault a resolve that has to make a set login on the cluster. The figures the test logs
// are the ones docs/reliability.md reports; MILLWRIGHT_CHAOS_NET_ROUNDS (make chaos-net) runs
// more rounds than the one make test runs.

const (
	// faultDeadline is the deadline a resolve is called with during a fault.
	faultDeadline = 750 * time.Millisecond
	// faultSlack is how far past its deadline a call may return: never a hang.
	faultSlack = 750 * time.Millisecond
)

// chaosRounds is how many rounds of every fault a chaos test runs: env (a positive integer)
// or 1.
func chaosRounds(t *testing.T, env string) int {
	v := os.Getenv(env)
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, env)
	require.Positive(t, n, env)
	return n
}

// throughFaultnet puts a faultnet proxy in front of the target cluster and registers the
// cluster at its address, so that every login roleset makes, and every credential it hands
// out, goes through it.
func (f *fixture) throughFaultnet(t *testing.T) *faultnet.Proxy {
	px, err := faultnet.Listen(f.host + ":" + strconv.Itoa(f.port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	host, port := px.HostPort()
	_, err = rolesetv1.NewClusterServiceClient(f.r.cc).UpsertCluster(adminCtx(), &rolesetv1.UpsertClusterRequest{
		ClusterId: f.clusterID, Host: host, Port: int32(port), MaintenanceDatabase: f.targetDB,
		AdminUser: f.adminUser, AdminPassword: f.adminPass})
	require.NoError(t, err)
	return px
}

// checkClusterLogins asserts that no half-made login is left: every set login on the cluster
// that holds one of the fixture's roles has its catalog row, and (checkRows) every row names
// a login that authenticates with the secret the row holds.
func (f *fixture) checkClusterLogins(t *testing.T) {
	t.Helper()
	rows := f.setLogins(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.superDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	found, err := conn.Query(ctx, `SELECT DISTINCT r.rolname FROM pg_roles r JOIN pg_auth_members m ON m.member = r.oid
		WHERE r.rolname LIKE 'wm\_set\_%' AND m.roleid = ANY($1)`, []int64{int64(f.emea.GetOid()), int64(f.apac.GetOid()), int64(f.amer.GetOid())})
	require.NoError(t, err)
	names, err := pgx.CollectRows(found, pgx.RowTo[string])
	require.NoError(t, err)
	for _, n := range names {
		require.Contains(t, rows, n, "set login %s on the cluster has no catalog row", n)
	}
	f.checkRows(t)
}

// refusedWithin calls resolve with faultDeadline and asserts the answer is not a "yes" and
// comes back within the deadline plus faultSlack; it returns the code and the time taken.
func refusedWithin(t *testing.T, resolve func(context.Context) (*rolesetv1.ResolveConnectionResponse, error)) (codes.Code, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultDeadline)
	defer cancel()
	start := time.Now()
	c, err := resolve(ctx)
	took := time.Since(start)
	require.Error(t, err, "a resolve that needs the cluster answered during the fault: %v", c)
	code := status.Code(err)
	require.Contains(t, []codes.Code{codes.Unavailable, codes.DeadlineExceeded}, code, "%v", err)
	require.Less(t, took, faultDeadline+faultSlack, "the call outlived its deadline")
	return code, took
}

// untilOK retries call until it succeeds (each try bounded by faultDeadline) and returns the
// answer and how long that took.
func untilOK[T any](t *testing.T, limit time.Duration, call func(context.Context) (T, error)) (T, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), faultDeadline)
		v, err := call(ctx)
		cancel()
		if err == nil {
			return v, time.Since(start)
		}
		require.Less(t, time.Since(start), limit, "not recovered: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
}

// noLeaks waits up to limit for the goroutines opts do not ignore to end, then fails with
// goleak's report of those left.
func noLeaks(t *testing.T, limit time.Duration, opts ...goleak.Option) {
	t.Helper()
	for end := time.Now().Add(limit); goleak.Find(opts...) != nil && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	goleak.VerifyNone(t, opts...)
}

func TestTargetClusterFaults(t *testing.T) {
	rounds := chaosRounds(t, "MILLWRIGHT_CHAOS_NET_ROUNDS")
	f := newFixture(t, 1)
	px := f.throughFaultnet(t)
	f.policy.setMember(member{Email: "gina@x", Username: "gina", Groups: []string{"emea", "amer"}})
	ref := "datatable://main?as=viewer"
	resolveAs := func(tok string) func(context.Context) (*rolesetv1.ResolveConnectionResponse, error) {
		return func(ctx context.Context) (*rolesetv1.ResolveConnectionResponse, error) {
			return f.r.conns().ResolveConnection(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), &rolesetv1.ResolveConnectionRequest{Reference: ref})
		}
	}
	// The warm path: gina's set login made, her resolve cached, before any fault.
	warmTok := f.viewerRun("gina@x")
	warm, err := resolveAs(warmTok)(context.Background())
	require.NoError(t, err)
	carolLogin := f.setLogin(t, f.emea.GetOid(), f.apac.GetOid())
	ctx := context.Background()

	faults := []struct {
		name   string
		inject func(*faultnet.Proxy)
	}{
		{"latency above the deadline", func(p *faultnet.Proxy) {
			p.SetLatency(faultnet.Up, faultDeadline)
			p.SetLatency(faultnet.Down, faultDeadline)
		}},
		{"stall (lost packets)", (*faultnet.Proxy).Stall},
		{"reset", (*faultnet.Proxy).Refuse},
		{"partition", (*faultnet.Proxy).Partition},
	}
	// Goroutines of the fixture, and faultnet's own for connections made after this point,
	// are not leaks of roleset. A connection cut by a deadline is closed by pgx in the
	// background with a cancel request bounded by 15 s, delayed by the fault's latency: the
	// check waits up to 10 s for such bounded goroutines to end.
	leaks := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/millwright/millwright/pkg/faultnet.(*Proxy).serve"),
		goleak.IgnoreAnyFunction("github.com/millwright/millwright/pkg/faultnet.(*Proxy).pump"),
		goleak.IgnoreAnyFunction("github.com/millwright/millwright/pkg/faultnet.(*Proxy).accept")}
	type figures struct {
		codes       map[codes.Code]int
		maxRefusal  time.Duration
		recover     []time.Duration
		warmAnswers int
		maxWarm     time.Duration
	}
	results := make([]figures, len(faults))
	for range rounds {
		for i, fault := range faults {
			t.Run(fault.name, func(t *testing.T) {
				fig := &results[i]
				if fig.codes == nil {
					fig.codes = map[codes.Code]int{}
				}
				fault.inject(px)
				// A resolve that has to make carol's set login on the cluster: refused in time.
				code, took := refusedWithin(t, resolveAs(f.viewerRun("carol@x")))
				fig.codes[code]++
				fig.maxRefusal = max(fig.maxRefusal, took)
				// The warm path does not touch the cluster and its streams are live: it answers,
				// with the same login, at once.
				start := time.Now()
				again, err := resolveAs(warmTok)(ctx)
				require.NoError(t, err, "the warm path (live stream) must answer during a cluster fault")
				require.Equal(t, warm.GetUser(), again.GetUser())
				require.True(t, f.r.stream.Live() && f.r.fol.Live(), "a cluster fault does not touch the streams")
				fig.warmAnswers++
				fig.maxWarm = max(fig.maxWarm, time.Since(start))

				px.Heal()
				healed := time.Now()
				c, _ := untilOK(t, 30*time.Second, resolveAs(f.viewerRun("carol@x")))
				fig.recover = append(fig.recover, time.Since(healed))
				require.Equal(t, carolLogin, c.GetUser())
				require.NoError(t, f.canLogin(c.GetUser(), c.GetPassword()))
				// One sweep (retire journal, reconcile) and no half-made login is left.
				_, err = f.r.eng.Sweep(ctx)
				require.NoError(t, err)
				f.checkClusterLogins(t)
				// Start the next fault from scratch: carol's login retired, caches dropped.
				_, err = f.r.eng.RetireSetLogin(ctx, f.clusterID, carolLogin, "test", false)
				require.NoError(t, err)
				f.r.eng.DropCaches()
				noLeaks(t, 10*time.Second, leaks...)
				_, err = resolveAs(warmTok)(ctx) // warm again for the next fault
				require.NoError(t, err)
			})
		}
	}
	for i, fault := range faults {
		fig := results[i]
		slices.Sort(fig.recover)
		t.Logf("FIGURES target fault %q: rounds=%d codes=%v max_refusal=%v warm_answers=%d max_warm=%v recover_median=%v recover_max=%v",
			fault.name, rounds, fig.codes, fig.maxRefusal.Round(time.Millisecond), fig.warmAnswers, fig.maxWarm.Round(time.Millisecond),
			fig.recover[len(fig.recover)/2].Round(time.Millisecond), fig.recover[len(fig.recover)-1].Round(time.Millisecond))
	}
}
