package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/billing/internal/app"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
)

// TestTokensThroughPolicy runs the real billing server (app.Serve, dialing policy as in
// production) against the real policy binary: the config tokens work as before; policy's user
// and job tokens authenticate (through policy, cached) and are refused with PermissionDenied
// on every billing RPC, a workspace admin's included; a revoked token and a finished run's
// token are refused with Unauthenticated within a bounded wait far below the cache's TTL
// (policy's stream drops the cached identity); unknown and malformed tokens are
// Unauthenticated.
func TestTokensThroughPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the policy binary")
	}
	ctx := context.Background()
	// Unpriced: member writes are not priced here, this test is about tokens.
	popts := servicetest.PolicyOptions{AdminToken: adminToken, ServiceToken: serviceToken}
	policy := servicetest.StartPolicy(t, popts)

	cfg := app.Config{
		Config: server.Config{Name: "billing", GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			DatabaseURL: server.DSN(billingtest.NewDB(t)), LogLevel: "error", LogFormat: "text",
			ShutdownTimeout: time.Second, AdminToken: adminToken, ServiceToken: serviceToken},
		PolicyAddr: policy.Addr, AuthorWeight: "1", OperatorWeight: "0.5", FreshnessBound: 5 * time.Second,
	}
	billingAddr, metricsAddr := serve(t, cfg, app.Hooks{})

	bcc, err := server.Dial(ctx, billingAddr, "") // tokens per call
	require.NoError(t, err)
	t.Cleanup(func() { bcc.Close() })
	bill, events := billingv1.NewBillingServiceClient(bcc), billingv1.NewEventServiceClient(bcc)

	acme := policy.Accounts(t, popts)

	setCap := func(token string) error {
		return servicetest.Err(bill.SetSeatCap(servicetest.Bearer(token), &billingv1.SetSeatCapRequest{Seats: 0}))
	}
	// The reading RPCs, each once; SetSeatCap is the superadmin's alone.
	reads := map[string]func(token string) error{
		"GetSeatUsage": func(token string) error {
			return servicetest.Err(bill.GetSeatUsage(servicetest.Bearer(token), &billingv1.GetSeatUsageRequest{}))
		},
		"CheckSeatCapForOperatorBuilder": func(token string) error {
			return servicetest.Err(bill.CheckSeatCapForOperatorBuilder(servicetest.Bearer(token), &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "acme"}))
		},
		"ListUsageReports": func(token string) error {
			return servicetest.Err(bill.ListUsageReports(servicetest.Bearer(token), &billingv1.ListUsageReportsRequest{}))
		},
		"Watch": func(token string) error {
			return servicetest.WatchAnswer(token, func(ctx context.Context) (billingv1.EventService_WatchClient, error) {
				return events.Watch(ctx, &billingv1.WatchRequest{})
			})
		},
	}
	require.Eventually(t, func() bool {
		for _, call := range reads {
			if call(adminToken) != nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "billing did not come up")

	t.Run("who gets what", func(t *testing.T) {
		// The reads are the superadmin's and the platform's; SetSeatCap the superadmin's alone.
		type want struct{ read, cap codes.Code }
		wants := map[servicetest.Kind]want{
			servicetest.KindSuperadmin: {codes.OK, codes.OK},
			servicetest.KindService:    {codes.OK, codes.PermissionDenied},
			servicetest.KindNone:       {codes.Unauthenticated, codes.Unauthenticated},
			servicetest.KindUser:       {codes.PermissionDenied, codes.PermissionDenied},
			servicetest.KindJob:        {codes.PermissionDenied, codes.PermissionDenied},
		}
		for _, tc := range acme.TokenCases(adminToken, serviceToken) {
			t.Run(tc.Name, func(t *testing.T) {
				check := func(name string, err error, want codes.Code, rule string) {
					require.Equal(t, want, status.Code(err), "%s: %v", name, err)
					reason, _ := errs.Reason(err)
					switch want {
					case codes.PermissionDenied:
						require.Equal(t, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, reason, name)
						require.Equal(t, map[string]string{"kind": string(tc.Kind), "allowed": rule}, errs.Infos(err)[0].GetMetadata(), name)
					case codes.Unauthenticated:
						require.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, reason, name)
					case codes.OK: // the code above is the whole expectation
					default:
						t.Fatalf("%s: no expectation for %v", name, want)
					}
				}
				for name, call := range reads {
					check(name, call(tc.Token), wants[tc.Kind].read, "superadmin,service")
				}
				check("SetSeatCap", setCap(tc.Token), wants[tc.Kind].cap, "superadmin")
			})
		}
	})

	acme.RevocationReaches(t, metricsAddr, "millwright_billing_token_cache_entries", adminToken, setCap)

	t.Run("the config tokens do not need policy", func(t *testing.T) {
		unseen := acme.NewToken(t, "boss") // never presented to billing, so not cached
		policy.Stop()
		require.NoError(t, setCap(adminToken))
		require.NoError(t, reads["GetSeatUsage"](serviceToken))
		// A policy token cannot be decided now: a failure to decide (which clients retry),
		// neither a yes nor a claim that the token is bad.
		cctx, cancel := context.WithTimeout(servicetest.Bearer(unseen.GetToken()), 2*time.Second)
		defer cancel()
		_, err := bill.GetSeatUsage(cctx, &billingv1.GetSeatUsageRequest{})
		require.Contains(t, []codes.Code{codes.Unavailable, codes.DeadlineExceeded}, status.Code(err), "%v", err)
	})
}
