package app_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/billing/internal/app"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
)

// TestPolicyDown (issue 16, item 4; docs/reliability.md): the real policy binary is killed
// (SIGKILL) while billing serves, and restarted on the same address and database. The
// decision billing needs policy for is a policy token's identity (docs/billing.md):
//   - a token billing has not cached is refused with Unavailable while policy is down;
//   - a cached one is answered (PermissionDenied on GetSeatUsage: known, not allowed) only
//     until policy's stream is seen broken, then Unavailable every time;
//   - the config tokens keep working (compared locally);
//   - after the restart billing decides new tokens again on its own: the time from policy
//     SERVING to the first decided new token is measured.
//
// It runs only with MILLWRIGHT_CHAOS_POLICY_ROUNDS set (make chaos-policy): with policy
// killed, a call asking policy takes up to 10 s to be refused (DeadlineExceeded), so one round
// takes about two minutes (docs/reliability.md).
func TestPolicyDown(t *testing.T) {
	v := os.Getenv("MILLWRIGHT_CHAOS_POLICY_ROUNDS")
	if testing.Short() || v == "" {
		t.Skip("make chaos-policy: builds and runs the policy binary, about 2 min a round")
	}
	rounds, err := strconv.Atoi(v)
	require.NoError(t, err)
	popts := servicetest.PolicyOptions{AdminToken: adminToken, ServiceToken: serviceToken}
	policy := servicetest.StartPolicy(t, popts)
	billingAddr, _ := serve(t, app.Config{
		Config: server.Config{Name: "billing", GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			DatabaseURL: server.DSN(billingtest.NewDB(t)), LogLevel: "error", LogFormat: "text",
			ShutdownTimeout: time.Second, AdminToken: adminToken, ServiceToken: serviceToken},
		PolicyAddr: policy.Addr, AuthorWeight: "1", OperatorWeight: "0.5", FreshnessBound: 5 * time.Second,
	}, app.Hooks{})
	bcc, err := server.Dial(context.Background(), billingAddr, "") // tokens per call
	require.NoError(t, err)
	t.Cleanup(func() { bcc.Close() })
	bill := billingv1.NewBillingServiceClient(bcc)
	usage := func(token string) codes.Code {
		return status.Code(servicetest.Err(bill.GetSeatUsage(servicetest.Bearer(token), &billingv1.GetSeatUsageRequest{})))
	}
	require.Eventually(t, func() bool { return usage(adminToken) == codes.OK }, 30*time.Second, 50*time.Millisecond)
	acme := policy.Accounts(t, popts)

	// refused: policy could not be asked. DeadlineExceeded is billing's own bound on the call
	// to policy running out (seen while the killed process's port is being re-dialled).
	refused := func(c codes.Code) bool { return c == codes.Unavailable || c == codes.DeadlineExceeded }
	var warmStop, firstDecision []time.Duration
	for range rounds {
		warm := acme.Boss.GetToken()
		require.Eventually(t, func() bool { return usage(warm) == codes.PermissionDenied }, 30*time.Second, 10*time.Millisecond)
		fresh, after := acme.NewToken(t, "dev").GetToken(), acme.NewToken(t, "dev").GetToken() // never used before

		policy.Stop() // SIGKILL
		killed := time.Now()
		require.True(t, refused(usage(fresh)), "a token not cached needs policy")
		for {
			code := usage(warm)
			if refused(code) {
				break
			}
			require.Equal(t, codes.PermissionDenied, code, "the cached identity, or Unavailable")
			require.Less(t, time.Since(killed), 5*time.Second, "warm answers went on after policy died")
			time.Sleep(time.Millisecond)
		}
		warmStop = append(warmStop, time.Since(killed))
		for range 20 {
			require.True(t, refused(usage(warm)), "no cached answer once the stream is down")
			require.Equal(t, codes.OK, usage(adminToken), "config tokens do not need policy")
			time.Sleep(5 * time.Millisecond)
		}

		policy.Restart(t)
		served := time.Now()
		for usage(after) != codes.PermissionDenied {
			require.Less(t, time.Since(served), 30*time.Second, "billing did not recover")
			time.Sleep(10 * time.Millisecond)
		}
		firstDecision = append(firstDecision, time.Since(served))
	}
	mm := func(ds []time.Duration) string {
		slices.Sort(ds)
		return "median=" + ds[len(ds)/2].Round(time.Millisecond).String() + " max=" + ds[len(ds)-1].Round(time.Millisecond).String()
	}
	t.Logf("FIGURES policy down (billing): rounds=%d warm_stop %s first_new_decision %s", rounds, mm(warmStop), mm(firstDecision))
}
