package e2e

// docs/reliability.md, "Postgres restarted under load": three replicas of every service (the
// stack's and two more chains from replicas_test.go's startReplicasB) on the stack's one
// Postgres, concurrent resolvers over 20 viewers, and Postgres stopped (fast or immediate),
// held down a second, and started again by scripts/localpg.sh, as many times as asked.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// TestPostgresRestart: for each shutdown mode (fast, immediate) and round, under load:
//   - every resolve answered names the login the viewer's roles decide (the one it named before
//     the outage, or, for the round's revoked viewer, the one after once every replica agrees);
//     every error is Unavailable or DeadlineExceeded;
//   - the time from Postgres accepting connections again to every replica of every service
//     answering a fresh call (recovery);
//   - a revoke (the round's victim taken out of g/emea) issued while Postgres is down, retried
//     until it succeeds, is honoured by every roleset replica, within 5 s of succeeding; after
//     that no replica answers the old login again.
//
// make test runs one round of each mode with 16 callers; make chaos-pg runs
// MILLWRIGHT_CHAOS_PG_ROUNDS rounds of each with 64.
func TestPostgresRestart(t *testing.T) {
	needsStack(t)
	// settle: how long the load runs on a healthy stack before the first fault and after each
	// recovery (where a stale answer would show).
	rounds, callers, settle := 1, 16, time.Second
	if s := os.Getenv("MILLWRIGHT_CHAOS_PG_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "MILLWRIGHT_CHAOS_PG_ROUNDS")
		rounds, callers, settle = n, 64, 2*time.Second
	}
	require.LessOrEqual(t, 2*rounds, loadViewers*2/5, "one victim per round: at most %d rounds", loadViewers/5)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	l := startViewerLoad(ctx, t)
	st, chains, viewers, before, fallback := l.st, l.chains, l.viewers, l.before, l.fallback
	ws, ada, members := l.ws, l.ada, l.members

	// allowed[v]: the logins a resolve of v may name now.
	allowed := map[string]*allowedAnswers{}
	for _, v := range viewers {
		allowed[v] = newAllowed(before[v])
	}
	var (
		violations violationLog
		okCalls    atomic.Int64
		refusals   sync.Map // codes.Code -> *atomic.Int64
	)
	violate := violations.add
	refused := func(code codes.Code) *atomic.Int64 {
		n, _ := refusals.LoadOrStore(code, &atomic.Int64{})
		return n.(*atomic.Int64)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	for range callers {
		load.Go(func() {
			for loadCtx.Err() == nil {
				v, c := viewers[rand.IntN(len(viewers))], chains[rand.IntN(len(chains))]
				a := allowed[v].judge(func() (string, error) {
					r, err := l.resolve(loadCtx, c, v)
					return r.GetUser(), err
				})
				if loadCtx.Err() != nil {
					return
				}
				switch code := status.Code(a.err); {
				case a.right:
					okCalls.Add(1)
				case a.err == nil:
					violate("wrong answer: %s on %s got %s, allowed %v then %v", v, c.name, a.got, a.was, a.now)
				case code == codes.Unavailable || code == codes.DeadlineExceeded:
					refused(code).Add(1)
					time.Sleep(10 * time.Millisecond) // a caller backs off; no hot loop on 2 cores
				default:
					violate("%s on %s refused with %v, want Unavailable or DeadlineExceeded", v, c.name, a.err)
				}
			}
		})
	}
	defer func() { stopLoad(); load.Wait() }()

	// serving says whether chain c answers a fresh call on each of its services: policy (a run
	// lookup), roleset (a resolve of the probe viewer, checked), billing (the seat usage).
	probe := viewers[0]
	serving := func(c replicaChain) error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := c.policy.GetRunIdentity(repBearer(cctx, l.svcToken), &policyv1.GetRunIdentityRequest{JobToken: l.job[probe]}); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		r, err := l.resolve(cctx, c, probe)
		if err != nil {
			return fmt.Errorf("roleset: %w", err)
		}
		if r.GetUser() != before[probe] {
			return fmt.Errorf("roleset answers %s for %s, want %s", r.GetUser(), probe, before[probe])
		}
		if _, err := c.billing.GetSeatUsage(repBearer(cctx, l.adminToken), &billingv1.GetSeatUsageRequest{}); err != nil {
			return fmt.Errorf("billing: %w", err)
		}
		return nil
	}

	type result struct {
		mode                   string
		down, recovery, revoke time.Duration
	}
	var results []result
	victims := l.emeaSets()
	time.Sleep(settle)
	for _, mode := range []string{"fast", "immediate"} {
		for range rounds {
			victim := victims[0]
			victims = victims[1:]
			start := time.Now()
			st.Postgres(t, "stop", mode)
			stopped := time.Now()

			// The revoke, issued while Postgres is down and retried until it succeeds.
			revoked := make(chan time.Time, 1)
			members["emea"] = slices.DeleteFunc(members["emea"], func(m string) bool { return m == victim })
			allowed[victim].Set(before[victim], fallback)
			go func() {
				for {
					cctx, cancel := context.WithTimeout(ada, 2*time.Second)
					_, err := ws.UpsertGroup(cctx, &policyv1.UpsertGroupRequest{Workspace: "demo", Name: "emea", Members: members["emea"]})
					cancel()
					if err == nil || ctx.Err() != nil {
						revoked <- time.Now()
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()

			time.Sleep(time.Second)
			st.Postgres(t, "start")
			back := time.Now()
			down := back.Sub(stopped)

			// Recovery: every chain answers a fresh call on every service.
			var wg sync.WaitGroup
			recovered := make([]time.Duration, len(chains))
			for i, c := range chains {
				wg.Go(func() {
					deadline := time.Now().Add(60 * time.Second)
					for err := serving(c); err != nil; err = serving(c) {
						if time.Now().After(deadline) {
							violate("chain %s not serving 60s after Postgres is back: %v", c.name, err)
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
					recovered[i] = time.Since(back)
				})
			}
			wg.Wait()
			recovery := slices.Max(recovered)

			// The revoke, honoured by every roleset replica within 5 s of succeeding.
			var done time.Time
			select {
			case done = <-revoked:
			case <-time.After(30 * time.Second):
				t.Fatalf("round %s: the revoke did not succeed within 30s of Postgres being back", mode)
			}
			require.NoError(t, ctx.Err())
			for _, c := range chains {
				repPoll(t, 5*time.Second+time.Until(done), func() (bool, string) {
					r, err := l.resolve(ctx, c, victim)
					return err == nil && r.GetUser() == fallback, fmt.Sprintf("%s on %s after the revoke: %s %v", victim, c.name, r.GetUser(), err)
				})
			}
			honoured := time.Since(done)
			allowed[victim].Set(fallback) // from now on the old login is a stale "yes"
			results = append(results, result{mode: mode, down: down, recovery: recovery, revoke: honoured})
			t.Logf("round %s: stopped in %v, down %v, every replica serving %v after Postgres was back %v, "+
				"revoke done %v after the stop, honoured by every replica %v later",
				mode, stopped.Sub(start), down, recovery, recovered, done.Sub(stopped), honoured)
			time.Sleep(settle)
		}
	}
	stopLoad()
	load.Wait()

	violations.requireNone(t)
	counts := map[codes.Code]int64{}
	refusals.Range(func(k, v any) bool { counts[k.(codes.Code)] = v.(*atomic.Int64).Load(); return true })
	for _, mode := range []string{"fast", "immediate"} {
		var rec, rev []time.Duration
		for _, r := range results {
			if r.mode == mode {
				rec, rev = append(rec, r.recovery), append(rev, r.revoke)
			}
		}
		slices.Sort(rec)
		slices.Sort(rev)
		t.Logf("FIGURES %s: %d restarts, %d callers; recovery median %v max %v; revoke honoured median %v max %v",
			mode, len(rec), callers, rec[len(rec)/2], rec[len(rec)-1], rev[len(rev)/2], rev[len(rev)-1])
	}
	t.Logf("FIGURES calls: %d answered right, refused %v, violations 0", okCalls.Load(), counts)
}

// Postgres runs scripts/localpg.sh on the stack's Postgres (start, or stop fast|immediate).
func (s *Stack) Postgres(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(s.root, "scripts", "localpg.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "MILLWRIGHT_RUN_DIR="+s.Dir, "MILLWRIGHT_PG_PORT="+strconv.Itoa(s.pgPort))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "localpg.sh %v: %s", args, out)
}
