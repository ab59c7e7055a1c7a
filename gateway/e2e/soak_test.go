package e2e

// docs/reliability.md, "Load with no fault": the viewer load of load_test.go (three replicas
// of every service on one Postgres, 20 viewers) with mixed traffic and two writers, every
// answer judged against a model, for as long as asked, while the services' memory and
// goroutines are sampled.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// The demo's shapes an operator may compose with builder rights on (scripts alice reads
// through g/emea): a flow of two scripts, and an app deployed multipart whose one runnable is
// a script by path.
const (
	soakFlow     = `{"modules": [{"id": "a", "value": {"type": "script", "path": "f/sales/fetch_orders"}}, {"id": "b", "value": {"type": "script", "path": "f/sales/summarize"}}]}`
	soakApp      = `{"files": {}, "runnables": {"r": {"name": "r", "type": "runnableByPath", "runType": "script", "path": "f/sales/fetch_orders"}}}`
	soakAppRules = `{"execution_mode": "publisher", "triggerables_v2": {}}`
)

// soakCall makes one call on chain c and reduces its answer to a string the model compares.
type soakCall func(ctx context.Context, c replicaChain) (string, error)

// soakRPC is one kind of call of the mixed traffic, drawn with its weight.
type soakRPC struct {
	name   string
	weight int
	// next picks one call and what it may answer.
	next func() (*allowedAnswers, soakCall)
	rpcStats
}

// TestSoak runs mixed traffic on three replicas of every service with no fault:
//   - callers spread over the replicas: ResolveConnection (job tokens of 20 viewers, most of
//     the traffic), builder checks (CheckFlow, CheckApp of the demo's shapes, by the operator
//     alice and by the developer devon), seat checks (CheckSeatCap of a new operator,
//     CheckSeatCapForOperatorBuilder of the demo);
//   - one writer flips the demo's operator builder rights on and off (as the workspace admin),
//     another disables and enables the role sales_emea (as the superadmin);
//   - every answer is judged against a model of what those writers set: during a change the
//     old or the new answer, once every replica gives the new one only the new one; any error
//     is a violation;
//   - per-RPC latency (p50, p99) and each service process's RSS and goroutines, sampled from
//     its /metrics (process_resident_memory_bytes, go_goroutines); they must stay flat.
//
// make test runs 15 s with 16 callers (most of the test's time is the stack starting); make soak
// runs MILLWRIGHT_SOAK_DURATION with 64.
func TestSoak(t *testing.T) {
	needsStack(t)
	duration, callers, sampleEvery := 15*time.Second, 16, 500*time.Millisecond
	// flipPause and togglePause: how long each writer waits between two changes (each change
	// also waits until every replica has it): a few settings flips a second at most, role
	// changes rarer (each retires the set logins holding the role).
	flipPause, togglePause := 300*time.Millisecond, time.Second
	if s := os.Getenv("MILLWRIGHT_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "MILLWRIGHT_SOAK_DURATION")
		duration, callers, sampleEvery = d, 64, 5*time.Second
		flipPause, togglePause = time.Second, 3*time.Second
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration+10*time.Minute)
	defer cancel()
	began := time.Now()
	l := startViewerLoad(ctx, t)
	alice, devon := l.st.Token(t, "alice-token"), l.st.Token(t, "devon-token")

	// No seat cap (the demo sets a small one), so that turning builder on is always allowed
	// and every seat check answers allowed.
	_, err := l.chains[0].billing.SetSeatCap(l.admin, &billingv1.SetSeatCapRequest{Seats: 0})
	require.NoError(t, err)
	usage, err := l.chains[0].billing.GetSeatUsage(l.admin, &billingv1.GetSeatUsageRequest{})
	require.NoError(t, err)
	author, operator := usage.GetWeights().GetAuthorMilliseats(), usage.GetWeights().GetOperatorMilliseats()
	list, err := l.chains[0].roles.ListRoles(l.admin, &rolesetv1.ListRolesRequest{ClusterId: "local"})
	require.NoError(t, err)
	var emeaID string
	for _, r := range list.GetRoles() {
		if r.GetName() == "sales_emea" {
			emeaID = r.GetRoleId()
		}
	}
	require.NotEmpty(t, emeaID)

	// The model. Builder rights (the demo starts with them off) decide the operator's builder
	// checks and the seat prices: the demo's operators (alice, bob, the viewers), operator-only
	// users, become authors with builder on, so turning it on costs their difference and then
	// nothing more; a new operator costs an operator's seat, or an author's with builder on.
	// The developer's checks do not depend on builder rights.
	type builderState struct{ operator, seatMember, seatBuilder string }
	operators := int64(2 + loadViewers)
	seat := func(delta int64, allowed bool) string { return fmt.Sprintf("delta %d allowed %v", delta, allowed) }
	builderModel := map[bool]builderState{
		false: {operator: "BUILDER_RIGHTS_OFF", seatMember: seat(operator, true), seatBuilder: seat(operators*(author-operator), true)},
		true:  {operator: "OK", seatMember: seat(author, true), seatBuilder: seat(0, true)},
	}
	opChecks, seatMember, seatBuilder := newAllowed(builderModel[false].operator),
		newAllowed(builderModel[false].seatMember), newAllowed(builderModel[false].seatBuilder)
	devChecks := newAllowed("OK")
	// The role: with sales_emea disabled, classes 1 and 4 get sales_all's own login; every
	// other viewer keeps its login.
	resolves := map[string]*allowedAnswers{}
	for _, v := range l.viewers {
		resolves[v] = newAllowed(l.before[v])
	}
	emeaSets := l.emeaSets()
	loginWith := func(v string, enabled bool) string {
		if !enabled && slices.Contains(emeaSets, v) {
			return l.fallback
		}
		return l.before[v]
	}

	builderOutcome := func(err error) (string, error) {
		switch {
		case err == nil:
			return "OK", nil
		case repBuilderOff(err):
			return "BUILDER_RIGHTS_OFF", nil
		}
		return "", err
	}
	checkFlow := func(token string) soakCall {
		return func(ctx context.Context, c replicaChain) (string, error) {
			_, err := c.builder.CheckFlow(repBearer(ctx, token), &policyv1.CheckFlowRequest{Workspace: "demo",
				Action: policyv1.FlowAction_FLOW_ACTION_SAVE, FlowJson: soakFlow})
			return builderOutcome(err)
		}
	}
	checkApp := func(token string) soakCall {
		return func(ctx context.Context, c replicaChain) (string, error) {
			_, err := c.builder.CheckApp(repBearer(ctx, token), &policyv1.CheckAppRequest{Workspace: "demo",
				AppValueJson: soakApp, PolicyJson: soakAppRules, DeployPath: policyv1.DeployPath_DEPLOY_PATH_MULTIPART})
			return builderOutcome(err)
		}
	}
	seatMemberCall := func(ctx context.Context, c replicaChain) (string, error) {
		r, err := c.billing.CheckSeatCap(repBearer(ctx, l.svcToken), &billingv1.CheckSeatCapRequest{
			Change: &billingv1.CheckSeatCapRequest_Member{Member: &billingv1.MemberChange{Workspace: "demo",
				Username: "soaknew", Email: "soaknew@example.com", Role: "operator"}}})
		return seat(r.GetDeltaMilliseats(), r.GetAllowed()), err
	}
	seatBuilderCall := func(ctx context.Context, c replicaChain) (string, error) {
		r, err := c.billing.CheckSeatCapForOperatorBuilder(repBearer(ctx, l.adminToken),
			&billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "demo"})
		return seat(r.GetDeltaMilliseats(), r.GetAllowed()), err
	}
	fixed := func(a *allowedAnswers, call soakCall) func() (*allowedAnswers, soakCall) {
		return func() (*allowedAnswers, soakCall) { return a, call }
	}
	resolveOf := func(v string) soakCall {
		return func(ctx context.Context, c replicaChain) (string, error) {
			r, err := l.resolve(ctx, c, v)
			return r.GetUser(), err
		}
	}
	rpcs := []*soakRPC{
		{name: "ResolveConnection", weight: 12, next: func() (*allowedAnswers, soakCall) {
			v := l.viewers[rand.IntN(len(l.viewers))]
			return resolves[v], resolveOf(v)
		}},
		{name: "CheckFlow operator", weight: 2, next: fixed(opChecks, checkFlow(alice))},
		{name: "CheckApp operator", weight: 2, next: fixed(opChecks, checkApp(alice))},
		{name: "CheckFlow developer", weight: 1, next: fixed(devChecks, checkFlow(devon))},
		{name: "CheckApp developer", weight: 1, next: fixed(devChecks, checkApp(devon))},
		{name: "CheckSeatCap", weight: 1, next: fixed(seatMember, seatMemberCall)},
		{name: "CheckSeatCapForOperatorBuilder", weight: 1, next: fixed(seatBuilder, seatBuilderCall)},
	}
	var draw []*soakRPC
	for _, r := range rpcs {
		for range r.weight {
			draw = append(draw, r)
		}
	}

	// settle polls (bounded) until every replica gives each call the answer want, after a
	// write: a replica learns of it through its stream.
	var violations violationLog
	settle := func(want string, calls ...soakCall) bool {
		for _, c := range l.chains {
			for _, call := range calls {
				deadline := time.Now().Add(10 * time.Second)
				for {
					got, err := call(ctx, c)
					if err == nil && got == want {
						break
					}
					if time.Now().After(deadline) || ctx.Err() != nil {
						violations.add("%s not settled on %s 10s after the write: %s %v", want, c.name, got, err)
						return false
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		return true
	}
	// Every replica starts from the model's answers (the viewers' logins: startViewerLoad).
	off := builderModel[false]
	require.True(t, settle(off.operator, checkFlow(alice), checkApp(alice)) && settle("OK", checkFlow(devon), checkApp(devon)) &&
		settle(off.seatMember, seatMemberCall) && settle(off.seatBuilder, seatBuilderCall), "%v", violations.list)

	t.Logf("set up in %v", time.Since(began))
	loadCtx, stopLoad := context.WithTimeout(ctx, duration)
	defer stopLoad()
	var load sync.WaitGroup
	for range callers {
		load.Go(func() {
			for loadCtx.Err() == nil {
				r, c := draw[rand.IntN(len(draw))], l.chains[rand.IntN(len(l.chains))]
				a, call := r.next()
				start := time.Now()
				v := a.judge(func() (string, error) {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					return call(cctx, c)
				})
				r.latency.add(time.Since(start))
				r.calls.Add(1)
				switch {
				case v.right:
				case v.err != nil:
					r.errors.Add(1)
					violations.add("%s on %s: %v", r.name, c.name, v.err)
				default:
					r.wrong.Add(1)
					violations.add("wrong answer: %s on %s got %q, allowed %v then %v", r.name, c.name, v.got, v.was, v.now)
				}
			}
		})
	}

	// The writers: each change first allows the old and the new answer, makes the write, waits
	// until every replica gives the new answer, then allows only that.
	var writers sync.WaitGroup
	var flips, toggles []time.Duration // write to settled on every replica
	writers.Go(func() {
		on := false
		for loadCtx.Err() == nil {
			on = !on
			old, now := builderModel[!on], builderModel[on]
			opChecks.Set(old.operator, now.operator)
			seatMember.Set(old.seatMember, now.seatMember)
			seatBuilder.Set(old.seatBuilder, now.seatBuilder)
			c := l.chains[rand.IntN(len(l.chains))]
			start := time.Now()
			_, err := c.settings.UpdateOperatorSettings(l.ada, &policyv1.UpdateOperatorSettingsRequest{Workspace: "demo",
				Patch: &policyv1.OperatorSettingsPatch{Builder: &on}})
			if err != nil {
				violations.add("builder %v through %s: %v", on, c.name, err)
				return // the state is unknown: the model cannot go on
			}
			if !settle(now.operator, checkFlow(alice), checkApp(alice)) || !settle(now.seatMember, seatMemberCall) ||
				!settle(now.seatBuilder, seatBuilderCall) {
				return
			}
			flips = append(flips, time.Since(start))
			opChecks.Set(now.operator)
			seatMember.Set(now.seatMember)
			seatBuilder.Set(now.seatBuilder)
			sleepCtx(loadCtx, flipPause)
		}
	})
	writers.Go(func() {
		enabled := true
		for loadCtx.Err() == nil {
			sleepCtx(loadCtx, togglePause)
			enabled = !enabled
			for _, v := range emeaSets {
				resolves[v].Set(loginWith(v, !enabled), loginWith(v, enabled))
			}
			c := l.chains[rand.IntN(len(l.chains))]
			start := time.Now()
			if _, err := c.roles.UpdateRole(l.admin, &rolesetv1.UpdateRoleRequest{RoleId: emeaID, Enabled: &enabled}); err != nil {
				violations.add("sales_emea enabled %v through %s: %v", enabled, c.name, err)
				return
			}
			for _, v := range emeaSets {
				if !settle(loginWith(v, enabled), resolveOf(v)) {
					return
				}
				resolves[v].Set(loginWith(v, enabled))
			}
			toggles = append(toggles, time.Since(start))
		}
	})

	// The sampler: each service process's RSS and goroutines, from its /metrics.
	type series struct{ rss, goroutines []float64 }
	procs := map[string]*series{}
	var names []string
	for _, c := range l.chains {
		for _, svc := range []string{"policy", "roleset", "billing"} {
			names = append(names, svc+" "+c.name)
			procs[svc+" "+c.name] = &series{}
		}
	}
	for loadCtx.Err() == nil {
		sleepCtx(loadCtx, sampleEvery)
		if loadCtx.Err() != nil {
			break
		}
		for _, c := range l.chains {
			for i, svc := range []string{"policy", "roleset", "billing"} {
				m, err := scrapeMetrics(ctx, c.metrics[i], "process_resident_memory_bytes", "go_goroutines")
				if err != nil {
					violations.add("metrics of %s %s: %v", svc, c.name, err)
					continue
				}
				s := procs[svc+" "+c.name]
				s.rss, s.goroutines = append(s.rss, m["process_resident_memory_bytes"]), append(s.goroutines, m["go_goroutines"])
			}
		}
	}
	load.Wait()
	writers.Wait()

	// The figures first, so that a failed run shows them too.
	var total, errors, wrong int64
	for _, r := range rpcs {
		total, errors, wrong = total+r.calls.Load(), errors+r.errors.Load(), wrong+r.wrong.Load()
		t.Logf("FIGURES rpc %s: %d calls, %d errors, %d wrong, p50 %v, p99 %v", r.name, r.calls.Load(),
			r.errors.Load(), r.wrong.Load(), r.latency.quantile(0.5), r.latency.quantile(0.99))
	}
	// Flat: the median of the last third of the samples within 1.5x of the first third's. A
	// leak grows with the calls made, and the calls come at a steady rate, so the late samples
	// of a leaking process keep rising (a goroutine or a few KiB per call is thousands a
	// second here); the medians ignore one GC cycle or a burst of calls in flight; 1.5x leaves
	// room for the heap settling at its working size and for the goroutines of calls in flight.
	for _, name := range names {
		s := procs[name]
		if len(s.rss) < 3 {
			violations.add("%s: %d samples, too few to judge", name, len(s.rss))
			continue
		}
		third := len(s.rss) / 3
		rss0, rss1 := median(s.rss[:third]), median(s.rss[len(s.rss)-third:])
		g0, g1 := median(s.goroutines[:third]), median(s.goroutines[len(s.goroutines)-third:])
		t.Logf("FIGURES process %s: RSS %.1f -> %.1f MiB, goroutines %.0f -> %.0f (medians of the first and last third of %d samples)",
			name, rss0/(1<<20), rss1/(1<<20), g0, g1, len(s.rss))
		if rss1 > 1.5*rss0 || g1 > 1.5*g0 {
			violations.add("%s not flat: RSS %v, goroutines %v", name, s.rss, s.goroutines)
		}
	}
	slices.Sort(flips)
	slices.Sort(toggles)
	if len(flips) == 0 || len(toggles) == 0 {
		violations.add("%d builder flips and %d role changes settled: the writers did not write", len(flips), len(toggles))
	} else {
		t.Logf("FIGURES writes: %d builder flips (every replica has it: median %v, max %v), %d sales_emea disables/enables (median %v, max %v)",
			len(flips), flips[len(flips)/2], flips[len(flips)-1], len(toggles), toggles[len(toggles)/2], toggles[len(toggles)-1])
	}
	t.Logf("FIGURES soak: %v, %d callers, %d calls, %d errors, %d wrong", duration, callers, total, errors, wrong)
	violations.requireNone(t)
}
