package app_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/pgtest"
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
	bin := servicetest.BuildPolicy(t)
	ctx := context.Background()
	policyDSN := pgtest.NewDatabase(t, "policy", func(ctx context.Context, dsn string) error {
		// Secrets in the environment, never on a command line (ps shows those to every user).
		mig := exec.CommandContext(ctx, bin, "migrate")
		mig.Env = append(os.Environ(), "DATABASE_URL="+dsn)
		out, err := mig.CombinedOutput()
		if err != nil {
			return fmt.Errorf("policy migrate: %w: %s", err, out)
		}
		return nil
	})
	policyAddr := servicetest.FreeAddr(t)
	pctx, stopPolicy := context.WithCancel(ctx)
	// --no-billing: member writes are not priced here, this test is about tokens.
	cmd := exec.CommandContext(pctx, bin, "serve", "--grpc-addr", policyAddr, "--metrics-addr", "",
		"--no-billing", "--log-level", "error")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+policyDSN,
		"MILLWRIGHT_ADMIN_TOKEN="+adminToken, "MILLWRIGHT_SERVICE_TOKEN="+serviceToken)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stopPolicy(); _ = cmd.Wait() })

	cfg := app.Config{
		Config: server.Config{Name: "billing", GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			DatabaseURL: server.DSN(billingtest.NewDB(t)), LogLevel: "error", LogFormat: "text",
			ShutdownTimeout: time.Second, AdminToken: adminToken, ServiceToken: serviceToken},
		PolicyAddr: policyAddr, AuthorWeight: "1", OperatorWeight: "0.5", FreshnessBound: 5 * time.Second,
	}
	bctx, cancel := context.WithCancel(ctx)
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Serve(bctx, cfg, app.Hooks{OnListen: func(g, m string) { addrs <- [2]string{g, m} }})
	}()
	var billingAddr, metricsAddr string
	select {
	case a := <-addrs:
		billingAddr, metricsAddr = a[0], a[1]
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	pcc, err := server.Dial(ctx, policyAddr, adminToken)
	require.NoError(t, err)
	t.Cleanup(func() { pcc.Close() })
	scc, err := server.Dial(ctx, policyAddr, serviceToken) // the platform's
	require.NoError(t, err)
	t.Cleanup(func() { scc.Close() })
	ws, tokens, runs := policyv1.NewWorkspaceServiceClient(pcc), policyv1.NewTokenServiceClient(pcc), policyv1.NewRunServiceClient(scc)
	bcc, err := server.Dial(ctx, billingAddr, "") // tokens per call
	require.NoError(t, err)
	t.Cleanup(func() { bcc.Close() })
	bill, events := billingv1.NewBillingServiceClient(bcc), billingv1.NewEventServiceClient(bcc)

	require.Eventually(t, func() bool {
		_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "acme", Name: "Acme",
			AdminEmail: "boss@acme.test", AdminUsername: "boss"})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "policy did not come up")
	_, err = ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: "acme", Username: "dev",
		Email: "dev@acme.test", Role: policyv1.Role_ROLE_DEVELOPER})
	require.NoError(t, err)
	newToken := func(user string) *policyv1.CreateTokenResponse {
		resp, err := tokens.CreateToken(ctx, &policyv1.CreateTokenRequest{Workspace: "acme", Username: user,
			ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))})
		require.NoError(t, err)
		return resp
	}
	devTok, bossTok := newToken("dev"), newToken("boss")
	rec, err := runs.RecordRun(ctx, &policyv1.RecordRunRequest{Workspace: "acme", JobId: servicetest.NewUUID(),
		PermissionedAs: "u/dev", Origin: policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE})
	require.NoError(t, err)
	jobTok := rec.GetJobToken()

	setCap := func(token string) error {
		_, err := bill.SetSeatCap(servicetest.Bearer(token), &billingv1.SetSeatCapRequest{Seats: 0})
		return err
	}
	// The reading RPCs, each once; SetSeatCap is the superadmin's alone.
	reads := map[string]func(token string) error{
		"GetSeatUsage": func(token string) error {
			_, err := bill.GetSeatUsage(servicetest.Bearer(token), &billingv1.GetSeatUsageRequest{})
			return err
		},
		"CheckSeatCapForOperatorBuilder": func(token string) error {
			_, err := bill.CheckSeatCapForOperatorBuilder(servicetest.Bearer(token), &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "acme"})
			return err
		},
		"ListUsageReports": func(token string) error {
			_, err := bill.ListUsageReports(servicetest.Bearer(token), &billingv1.ListUsageReportsRequest{})
			return err
		},
		"Watch": func(token string) error {
			wctx, cancel := context.WithTimeout(servicetest.Bearer(token), 5*time.Second)
			defer cancel()
			s, err := events.Watch(wctx, &billingv1.WatchRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv() // the refusal, or the first heartbeat
			return err
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
		cases := []struct {
			name, token   string
			read, cap     codes.Code
			kind, capRule string // of a ROLE_NOT_ALLOWED refusal
		}{
			{"superadmin token", adminToken, codes.OK, codes.OK, "", ""},
			{"service token", serviceToken, codes.OK, codes.PermissionDenied, "service", "superadmin"},
			{"no token", "", codes.Unauthenticated, codes.Unauthenticated, "", ""},
			{"garbage", "garbage", codes.Unauthenticated, codes.Unauthenticated, "", ""},
			{"malformed user token", "mwu_short", codes.Unauthenticated, codes.Unauthenticated, "", ""},
			{"unknown user token", "mwu_" + strings.Repeat("A", 43), codes.Unauthenticated, codes.Unauthenticated, "", ""},
			{"unknown job token", "mwj_" + strings.Repeat("A", 43), codes.Unauthenticated, codes.Unauthenticated, "", ""},
			{"a developer's user token", devTok.GetToken(), codes.PermissionDenied, codes.PermissionDenied, "user", "superadmin"},
			{"a workspace admin's user token", bossTok.GetToken(), codes.PermissionDenied, codes.PermissionDenied, "user", "superadmin"},
			{"a job token", jobTok, codes.PermissionDenied, codes.PermissionDenied, "job", "superadmin"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				check := func(name string, err error, want codes.Code, rule string) {
					require.Equal(t, want, status.Code(err), "%s: %v", name, err)
					reason, _ := errs.Reason(err)
					switch want {
					case codes.PermissionDenied:
						require.Equal(t, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, reason, name)
						require.Equal(t, map[string]string{"kind": tc.kind, "allowed": rule}, errs.Infos(err)[0].GetMetadata(), name)
					case codes.Unauthenticated:
						require.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, reason, name)
					case codes.OK: // the code above is the whole expectation
					default:
						t.Fatalf("%s: no expectation for %v", name, want)
					}
				}
				for name, call := range reads {
					check(name, call(tc.token), tc.read, "superadmin,service")
				}
				check("SetSeatCap", setCap(tc.token), tc.cap, tc.capRule)
			})
		}
	})

	cached := func(t *testing.T, token string) {
		t.Helper()
		servicetest.WaitTokenCached(t, metricsAddr, "millwright_billing_token_cache_entries",
			func() bool { return status.Code(setCap(token)) == codes.PermissionDenied })
	}
	refusedWithin := func(t *testing.T, token string) {
		t.Helper()
		servicetest.RefusedWithin(t, func() bool { return status.Code(setCap(token)) == codes.Unauthenticated })
	}

	t.Run("a revoked user token is Unauthenticated within a bounded wait", func(t *testing.T) {
		cached(t, devTok.GetToken())
		_, err := tokens.RevokeToken(ctx, &policyv1.RevokeTokenRequest{Workspace: "acme", TokenId: devTok.GetTokenId()})
		require.NoError(t, err)
		refusedWithin(t, devTok.GetToken())
		require.Equal(t, codes.PermissionDenied, status.Code(setCap(bossTok.GetToken())), "other tokens are unaffected")
		require.NoError(t, setCap(adminToken))
	})

	t.Run("a finished run's job token is Unauthenticated within a bounded wait", func(t *testing.T) {
		cached(t, jobTok)
		_, err := runs.FinishRun(ctx, &policyv1.FinishRunRequest{Workspace: "acme", JobId: rec.GetRun().GetJobId()})
		require.NoError(t, err)
		refusedWithin(t, jobTok)
	})

	t.Run("the config tokens do not need policy", func(t *testing.T) {
		unseen := newToken("boss") // never presented to billing, so not cached
		stopPolicy()
		_ = cmd.Wait()
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
