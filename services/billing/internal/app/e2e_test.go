package app_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/services/billing/internal/app"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
)

// buildPolicy builds the real policy command (policy's packages are internal to its module,
// so it runs as a process, as in production). The build cache makes repeat runs quick.
func buildPolicy(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "policy")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/millwright/millwright/services/policy/cmd/policy")
	cmd.Dir = "../../../policy" // inside the workspace, so the policy module resolves
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build policy: %s", out)
	return bin
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// TestPolicyRefusesBuilderOverCap runs the real policy service and the real billing service
// against each other: billing follows policy's stream and snapshot, policy's
// UpdateOperatorSettings asks billing before committing builder-on, and over the cap it
// refuses with FailedPrecondition SEAT_CAP_EXCEEDED carrying before / after / cap (the
// gateway maps that code to 409).
func TestPolicyRefusesBuilderOverCap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the policy binary")
	}
	bin := buildPolicy(t)
	ctx := context.Background()
	policyDSN := pgtest.NewDatabase(t, "policy", func(ctx context.Context, dsn string) error {
		out, err := exec.CommandContext(ctx, bin, "migrate", "--database-url", dsn).CombinedOutput()
		if err != nil {
			return &exec.ExitError{Stderr: out}
		}
		return nil
	})
	policyAddr, billingAddr := freeAddr(t), freeAddr(t)

	pctx, stopPolicy := context.WithCancel(ctx)
	cmd := exec.CommandContext(pctx, bin, "serve", "--grpc-addr", policyAddr, "--metrics-addr", "",
		"--database-url", policyDSN, "--billing-addr", billingAddr, "--log-level", "error")
	cmd.Env = append(os.Environ(), "MILLWRIGHT_ADMIN_TOKEN="+adminToken, "MILLWRIGHT_SERVICE_TOKEN="+serviceToken)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stopPolicy(); _ = cmd.Wait() })

	billingDSN := billingtest.NewDB(t)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, q := range []struct{ dsn, sql string }{
			{billingDSN, `SELECT row_to_json(x)::text FROM (SELECT * FROM projection_state) x`},
			{billingDSN, `SELECT row_to_json(x)::text FROM (SELECT * FROM workspace_builder) x`},
			{billingDSN, `SELECT row_to_json(x)::text FROM (SELECT * FROM member) x`},
			{policyDSN, `SELECT row_to_json(x)::text FROM (SELECT id, kind, workspace, key, op, payload FROM stream_outbox ORDER BY id) x`},
		} {
			rows, err := billingtest.Pool(t, q.dsn).Query(ctx, q.sql)
			if err != nil {
				t.Log(err)
				continue
			}
			for rows.Next() {
				var line string
				_ = rows.Scan(&line)
				t.Log(line)
			}
			rows.Close()
		}
	})
	bctx, stopBilling := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- app.Serve(bctx, app.Config{
			Config: server.Config{Name: "billing", GRPCAddr: billingAddr, DatabaseURL: server.DSN(billingDSN),
				LogLevel: "error", LogFormat: "text", ShutdownTimeout: time.Second,
				AdminToken: adminToken, ServiceToken: serviceToken},
			PolicyAddr: policyAddr, AuthorWeight: "1", OperatorWeight: "0.5", FreshnessBound: 5 * time.Second,
		}, app.Hooks{})
	}()
	t.Cleanup(func() { stopBilling(); <-done })

	pcc, err := server.Dial(ctx, policyAddr, adminToken)
	require.NoError(t, err)
	defer pcc.Close()
	bcc, err := server.Dial(ctx, billingAddr, adminToken)
	require.NoError(t, err)
	defer bcc.Close()
	ws, set := policyv1.NewWorkspaceServiceClient(pcc), policyv1.NewSettingsServiceClient(pcc)
	bill := billingv1.NewBillingServiceClient(bcc)

	require.Eventually(t, func() bool {
		_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "acme", Name: "Acme", AdminEmail: "boss@acme.test", AdminUsername: "boss"})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "policy did not come up")
	_, err = ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "ops", Name: "Ops", AdminEmail: "boss@acme.test", AdminUsername: "boss"})
	require.NoError(t, err)
	members := []*policyv1.UpsertMemberRequest{
		{Workspace: "acme", Username: "dev", Email: "dev@acme.test", Role: policyv1.Role_ROLE_DEVELOPER},
		// dev authors in acme and is an operator in ops: builder there costs them nothing.
		{Workspace: "ops", Username: "dev", Email: "DEV@acme.test", Role: policyv1.Role_ROLE_OPERATOR},
		{Workspace: "ops", Username: "op1", Email: "op1@acme.test", Role: policyv1.Role_ROLE_OPERATOR},
		{Workspace: "ops", Username: "op2", Email: "op2@acme.test", Role: policyv1.Role_ROLE_OPERATOR},
		{Workspace: "ops", Username: "gone", Email: "gone@acme.test", Role: policyv1.Role_ROLE_OPERATOR, Disabled: true},
	}
	for _, m := range members {
		_, err := ws.UpsertMember(ctx, m)
		require.NoError(t, err)
	}

	// boss 1 + dev 1 + op1 0.5 + op2 0.5 = 3 seats, once billing has caught up.
	require.Eventually(t, func() bool {
		u, err := bill.GetSeatUsage(ctx, &billingv1.GetSeatUsageRequest{})
		return err == nil && u.GetUsage().GetSeats() == "3"
	}, 30*time.Second, 50*time.Millisecond, "billing did not follow policy's stream")
	_, err = bill.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 3})
	require.NoError(t, err)

	builderOn := &policyv1.UpdateOperatorSettingsRequest{Workspace: "ops", Patch: &policyv1.OperatorSettingsPatch{Builder: proto.Bool(true)}}
	_, err = set.UpdateOperatorSettings(ctx, builderOn)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	reason, ok := errs.Reason(err)
	require.True(t, ok)
	require.Equal(t, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED, reason)
	require.Equal(t, map[string]string{"before": "3", "after": "4", "cap": "3"}, errs.Infos(err)[0].GetMetadata())
	got, err := set.GetOperatorSettings(ctx, &policyv1.GetOperatorSettingsRequest{Workspace: "ops"})
	require.NoError(t, err)
	require.False(t, got.GetSettings().GetBuilder(), "the refused change must not be committed")

	_, err = bill.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 4})
	require.NoError(t, err)
	resp, err := set.UpdateOperatorSettings(ctx, builderOn)
	require.NoError(t, err)
	require.True(t, resp.GetSettings().GetBuilder())
	// The response's stream position names the settings event: billing, asked to be at least
	// that fresh, already counts everyone in ops as an author.
	p, err := bill.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "ops", MinPosition: resp.GetStreamPosition()})
	require.NoError(t, err)
	require.Equal(t, "4", p.GetBefore().GetSeats())
	require.Equal(t, int64(0), p.GetDeltaMilliseats(), "re-enabling is a zero delta")

	// Lowering the cap below usage does not block re-saving builder on.
	_, err = bill.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 1})
	require.NoError(t, err)
	_, err = set.UpdateOperatorSettings(ctx, builderOn)
	require.NoError(t, err)

	// Two workspaces enabled at the same moment, each affordable alone, not both: policy
	// serializes builder-on changes, so the second is priced after the first and refused.
	for _, w := range []string{"w1", "w2"} {
		_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: w, Name: w, AdminEmail: "boss@acme.test", AdminUsername: "boss"})
		require.NoError(t, err)
		for _, u := range []string{"a", "b"} {
			_, err := ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: w, Username: w + u,
				Email: w + u + "@acme.test", Role: policyv1.Role_ROLE_OPERATOR})
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool { // 4 + two half seats in each of w1 and w2
		u, err := bill.GetSeatUsage(ctx, &billingv1.GetSeatUsageRequest{})
		return err == nil && u.GetUsage().GetSeats() == "6"
	}, 30*time.Second, 20*time.Millisecond)
	_, err = bill.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 7})
	require.NoError(t, err)
	results := make(chan error, 2)
	for _, w := range []string{"w1", "w2"} {
		go func() {
			_, err := set.UpdateOperatorSettings(ctx, &policyv1.UpdateOperatorSettingsRequest{Workspace: w,
				Patch: &policyv1.OperatorSettingsPatch{Builder: proto.Bool(true)}})
			results <- err
		}()
	}
	var allowed, refused int
	for range 2 {
		switch err := <-results; status.Code(err) {
		case codes.OK:
			allowed++
		case codes.FailedPrecondition:
			refused++
		default:
			t.Fatalf("unexpected answer: %v", err)
		}
	}
	require.Equal(t, 1, allowed, "exactly one of two concurrent builder-on changes fits under the cap")
	require.Equal(t, 1, refused)
}
