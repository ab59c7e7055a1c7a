package app_test

import (
	"context"
	"strings"
	"sync"
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
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/billing/internal/app"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
)

// pair is the real policy binary and the real billing server against each other: billing
// follows policy's stream and snapshot, and policy asks billing (--billing-addr) to price
// every change that may add seats before committing it.
type pair struct {
	ws   policyv1.WorkspaceServiceClient
	set  policyv1.SettingsServiceClient
	bill billingv1.BillingServiceClient
	// stopBilling stops billing (idempotent; also run at cleanup).
	stopBilling func()
	// policy is the policy process; billingDSN billing's database.
	policy     *servicetest.Policy
	billingDSN string
}

func startPair(t *testing.T) *pair { return startPairWith(t) }

// startPairWith is startPair with extra go build flags for policy (e.g. the fault build).
func startPairWith(t *testing.T, policyBuildFlags ...string) *pair {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the policy binary")
	}
	ctx := context.Background()
	billingAddr := servicetest.FreeAddr(t)
	policy := servicetest.StartPolicy(t, servicetest.PolicyOptions{AdminToken: adminToken, ServiceToken: serviceToken,
		BillingAddr: billingAddr, BuildFlags: policyBuildFlags})
	policyAddr, policyDSN := policy.Addr, policy.DSN

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
	bctx, cancelBilling := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- app.Serve(bctx, app.Config{
			Config: server.Config{Name: "billing", GRPCAddr: billingAddr, DatabaseURL: server.DSN(billingDSN),
				LogLevel: "error", LogFormat: "text", ShutdownTimeout: time.Second,
				AdminToken: adminToken, ServiceToken: serviceToken},
			PolicyAddr: policyAddr, AuthorWeight: "1", OperatorWeight: "0.5", FreshnessBound: 5 * time.Second,
		}, app.Hooks{})
	}()
	var once sync.Once
	stopBilling := func() {
		once.Do(func() {
			cancelBilling()
			if err := <-done; err != nil {
				t.Logf("billing stopped: %v", err)
			}
		})
	}
	t.Cleanup(stopBilling)

	pcc, err := server.Dial(ctx, policyAddr, adminToken)
	require.NoError(t, err)
	t.Cleanup(func() { pcc.Close() })
	bcc, err := server.Dial(ctx, billingAddr, adminToken)
	require.NoError(t, err)
	t.Cleanup(func() { bcc.Close() })
	p := &pair{ws: policyv1.NewWorkspaceServiceClient(pcc), set: policyv1.NewSettingsServiceClient(pcc),
		bill: billingv1.NewBillingServiceClient(bcc), stopBilling: stopBilling, policy: policy, billingDSN: billingDSN}
	require.Eventually(t, func() bool {
		_, err := p.bill.GetSeatUsage(ctx, &billingv1.GetSeatUsageRequest{})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "billing did not come up")
	return p
}

// seatsAre waits until billing, following policy's stream, counts want seats.
func (p *pair) seatsAre(t *testing.T, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		u, err := p.bill.GetSeatUsage(context.Background(), &billingv1.GetSeatUsageRequest{})
		return err == nil && u.GetUsage().GetSeats() == want
	}, 30*time.Second, 20*time.Millisecond, "billing did not follow policy's stream to %s seats", want)
}

func (p *pair) setCap(t *testing.T, seats int64) {
	t.Helper()
	_, err := p.bill.SetSeatCap(context.Background(), &billingv1.SetSeatCapRequest{Seats: seats})
	require.NoError(t, err)
}

// requireSeatCapExceeded asserts policy's refusal: FailedPrecondition, SEAT_CAP_EXCEEDED, the
// numbers in the ErrorInfo metadata.
func requireSeatCapExceeded(t *testing.T, err error, before, after, capSeats string) {
	t.Helper()
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	reason, ok := errs.Reason(err)
	require.True(t, ok)
	require.Equal(t, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED, reason)
	require.Equal(t, map[string]string{"before": before, "after": after, "cap": capSeats}, errs.Infos(err)[0].GetMetadata())
}

// TestPolicyRefusesBuilderOverCap runs the real policy service and the real billing service
// against each other: billing follows policy's stream and snapshot, policy's
// UpdateOperatorSettings asks billing before committing builder-on, and over the cap it
// refuses with FailedPrecondition SEAT_CAP_EXCEEDED carrying before / after / cap (the
// gateway maps that code to 409).
func TestPolicyRefusesBuilderOverCap(t *testing.T) {
	pp := startPair(t)
	ctx := context.Background()
	ws, set, bill := pp.ws, pp.set, pp.bill

	require.Eventually(t, func() bool {
		_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "acme", Name: "Acme", AdminEmail: "boss@acme.test", AdminUsername: "boss"})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "policy did not come up")
	_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "ops", Name: "Ops", AdminEmail: "boss@acme.test", AdminUsername: "boss"})
	require.NoError(t, err)
	members := []*policyv1.UpsertMemberRequest{
		{Workspace: "acme", Username: "dev", Email: "dev@acme.test", Role: policyv1.Role_ROLE_DEVELOPER},
		// dev authors in acme and is an operator in ops: builder there costs them nothing.
		{Workspace: "ops", Username: "dev", Email: "dev@acme.test", Role: policyv1.Role_ROLE_OPERATOR},
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
	requireSeatCapExceeded(t, err, "3", "4", "3")
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
	// (No cap while their operators are added: new members are priced too.)
	pp.setCap(t, 0)
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
	requireOneFits(t, results, nil, "exactly one of two concurrent builder-on changes fits under the cap")
}

// requireOneFits reads the answers of two concurrent priced changes: exactly one is allowed,
// the other refused with FailedPrecondition (and checked by refused, if not nil).
func requireOneFits(t *testing.T, results <-chan error, refused func(error), msg string) {
	t.Helper()
	var nAllowed, nRefused int
	for range 2 {
		switch err := <-results; status.Code(err) {
		case codes.OK:
			nAllowed++
		case codes.FailedPrecondition:
			if refused != nil {
				refused(err)
			}
			nRefused++
		default:
			t.Fatalf("unexpected answer: %v", err)
		}
	}
	require.Equal(t, 1, nAllowed, msg)
	require.Equal(t, 1, nRefused)
}

// TestPolicyRefusesMemberOverCap: member writes that may add seats (a new developer or
// operator, an operator promoted, a disabled member re-enabled, an operator added to a builder
// workspace, a new workspace's first admin) are priced by billing before policy commits them,
// and refused over the cap exactly like builder-on; changes that cost nothing pass at the cap;
// two concurrent adds that fit only one at a time cannot both pass; and changes that cannot add
// seats never ask billing (they succeed with billing stopped, while an add fails closed).
func TestPolicyRefusesMemberOverCap(t *testing.T) {
	pp := startPair(t)
	ctx := context.Background()
	ws := pp.ws
	dev, op := policyv1.Role_ROLE_DEVELOPER, policyv1.Role_ROLE_OPERATOR
	upsert := func(w, user, email string, role policyv1.Role, disabled bool) error {
		_, err := ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: w, Username: user, Email: email,
			Role: role, Disabled: disabled})
		return err
	}
	create := func(w, admin, email string) error {
		_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: w, Name: w, AdminEmail: email, AdminUsername: admin})
		return err
	}
	// policyState is every member and builder flag with the stream position: a refused change
	// must leave all of it, the position included, as it was.
	policyState := func() *policyv1.GetMembershipSnapshotResponse {
		snap, err := ws.GetMembershipSnapshot(ctx, &policyv1.GetMembershipSnapshotRequest{})
		require.NoError(t, err)
		return snap
	}

	require.Eventually(t, func() bool { return create("acme", "boss", "boss@acme.test") == nil },
		30*time.Second, 100*time.Millisecond, "policy did not come up")
	require.NoError(t, create("ops", "boss", "boss@acme.test"))
	for _, m := range []struct {
		w, user, email string
		role           policyv1.Role
		disabled       bool
	}{
		{"acme", "dev", "dev@acme.test", dev, false},
		{"acme", "demo", "demo@acme.test", dev, false},
		{"acme", "op1", "op1@acme.test", op, false},
		{"acme", "op2", "op2@acme.test", op, false},
		{"acme", "off", "off@acme.test", dev, true},
		// dev authors in acme: as an operator of ops, even with builder on, they cost nothing.
		{"ops", "dev", "dev@acme.test", op, false},
	} {
		require.NoError(t, upsert(m.w, m.user, m.email, m.role, m.disabled))
	}
	_, err := pp.set.UpdateOperatorSettings(ctx, &policyv1.UpdateOperatorSettingsRequest{Workspace: "ops",
		Patch: &policyv1.OperatorSettingsPatch{Builder: proto.Bool(true)}})
	require.NoError(t, err)
	// boss 1 + dev 1 + demo 1 + op1 0.5 + op2 0.5 = 4 seats; the cap is at the count.
	pp.seatsAre(t, "4")
	pp.setCap(t, 4)

	refusals := []struct {
		name   string
		change func() error
		after  string
	}{
		{"a new developer", func() error { return upsert("acme", "new", "new@acme.test", dev, false) }, "5"},
		{"a new operator", func() error { return upsert("acme", "new", "new@acme.test", op, false) }, "4.5"},
		{"an operator promoted", func() error { return upsert("acme", "op1", "op1@acme.test", dev, false) }, "4.5"},
		{"a disabled developer re-enabled", func() error { return upsert("acme", "off", "off@acme.test", dev, false) }, "5"},
		{"an operator added to a builder workspace", func() error { return upsert("ops", "new", "new@acme.test", op, false) }, "5"},
		{"a new workspace with a new admin", func() error { return create("lab", "chief", "chief@acme.test") }, "5"},
	}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			before := policyState()
			requireSeatCapExceeded(t, tt.change(), "4", tt.after, "4")
			require.True(t, proto.Equal(before, policyState()), "the refused change wrote nothing")
		})
	}

	t.Run("allowed at the cap: changes that cost nothing", func(t *testing.T) {
		// boss already authors: a new workspace of theirs is free.
		require.NoError(t, create("lab", "boss", "boss@acme.test"))
		// dev already authors in acme: a developer in lab under the same email is free.
		require.NoError(t, upsert("lab", "dev", "dev@acme.test", dev, false))
		// ...and so is promoting their operator membership of ops.
		require.NoError(t, upsert("ops", "dev", "dev@acme.test", dev, false))
		pp.seatsAre(t, "4")
	})

	t.Run("two concurrent adds at cap-1: exactly one passes", func(t *testing.T) {
		pp.setCap(t, 5)
		results := make(chan error, 2)
		for _, w := range []string{"acme", "lab"} { // two workspaces: only the seat lock orders them
			go func() { results <- upsert(w, "c-"+w, "c-"+w+"@acme.test", dev, false) }()
		}
		requireOneFits(t, results, func(err error) { requireSeatCapExceeded(t, err, "5", "6", "5") },
			"exactly one of two concurrent adds fits under the cap")
		pp.seatsAre(t, "5")
		var added int
		for _, m := range policyState().GetMembers() {
			if strings.HasPrefix(m.GetUsername(), "c-") {
				added++
			}
		}
		require.Equal(t, 1, added, "the refused add was not written")
	})

	t.Run("changes that cannot add seats do not ask billing", func(t *testing.T) {
		pp.stopBilling()
		require.NoError(t, upsert("acme", "demo", "demo@acme.test", op, false), "demoting")
		require.NoError(t, upsert("acme", "op2", "op2@acme.test", op, true), "disabling")
		require.NoError(t, upsert("acme", "dev", "dev@acme.test", dev, false), "re-saving unchanged")
		_, err := ws.RemoveMember(ctx, &policyv1.RemoveMemberRequest{Workspace: "acme", Username: "op1"})
		require.NoError(t, err, "removing")
		// A change that may add seats fails closed while billing cannot price it: policy
		// answers Unavailable after its bounded wait for billing (pkg/server.UpstreamWait), or
		// this client's own equal bound ends first (DeadlineExceeded). Either way: not written.
		before := policyState()
		err = upsert("acme", "late", "late@acme.test", dev, false)
		require.Contains(t, []codes.Code{codes.Unavailable, codes.DeadlineExceeded}, status.Code(err), "%v", err)
		require.True(t, proto.Equal(before, policyState()), "the unpriced change wrote nothing")
	})
}
