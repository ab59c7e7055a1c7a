package itest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPolicyDown (issue 16, item 4; docs/reliability.md): policy goes away (its server stops
// and closes every connection, as the kernel does for a killed process) while roleset serves,
// and comes back on the same address with the same data. Asserted and measured per round:
//   - a resolve of a run not cached (it needs policy) is refused with Unavailable, never a
//     "yes";
//   - a warm (cached) resolve answers only while policy's stream is live: the time from the
//     kill to its first refusal, after which it is refused every time;
//   - a run finished while policy was down is refused after the restart (no stale "yes": the
//     follower dropped the cache when the stream broke);
//   - recovery on its own: the time from policy serving again to the first new decision, and
//     to the warm path (the follower live) again.
//
// MILLWRIGHT_CHAOS_POLICY_ROUNDS (make chaos-policy) runs more rounds than make test's one.
func TestPolicyDown(t *testing.T) {
	rounds := chaosRounds(t, "MILLWRIGHT_CHAOS_POLICY_ROUNDS")
	f := newFixture(t, 1)
	resolveAs := func(tok string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			c, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
			return c.GetUser(), err
		}
	}
	var warmStop, firstDecision, warmBack []time.Duration
	for range rounds {
		warmTok, finishedTok := f.viewerRun("alice@x"), f.viewerRun("bob@x")
		for _, tok := range []string{warmTok, finishedTok} {
			_, err := resolveAs(tok)(context.Background())
			require.NoError(t, err)
		}

		f.policySrv.Stop()
		killed := time.Now()
		_, err := resolveAs(f.viewerRun("carol@x"))(context.Background())
		require.Equal(t, codes.Unavailable, status.Code(err), "a run not cached needs policy: %v", err)
		// The warm answer may go on only until the follower has seen the stream break.
		for {
			_, err := resolveAs(warmTok)(context.Background())
			if err != nil {
				require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
				break
			}
			require.Less(t, time.Since(killed), 5*time.Second, "warm answers went on after policy died")
			time.Sleep(time.Millisecond)
		}
		warmStop = append(warmStop, time.Since(killed))
		require.False(t, f.r.fol.Live())
		f.policy.finish(finishedTok) // written to policy's data while it is down
		for range 20 {
			for _, tok := range []string{warmTok, finishedTok} {
				_, err := resolveAs(tok)(context.Background())
				require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}

		f.servePolicy(f.policyAddr)
		served := time.Now()
		_, took := untilOK(t, 30*time.Second, resolveAs(f.viewerRun("carol@x")))
		firstDecision = append(firstDecision, took)
		require.Eventually(t, f.r.fol.Live, 30*time.Second, time.Millisecond)
		warmBack = append(warmBack, time.Since(served))
		_, err = resolveAs(finishedTok)(context.Background())
		require.Equal(t, codes.Unauthenticated, status.Code(err), "a run finished during the outage: %v", err)
		_, err = resolveAs(warmTok)(context.Background())
		require.NoError(t, err)
	}
	t.Logf("FIGURES policy down (roleset): rounds=%d warm_stop %s first_new_decision %s warm_live_again %s",
		rounds, medianMax(warmStop), medianMax(firstDecision), medianMax(warmBack))
}

// medianMax formats the median and the maximum of ds.
func medianMax(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return "median=" + s[len(s)/2].Round(time.Millisecond).String() + " max=" + s[len(s)-1].Round(time.Millisecond).String()
}
