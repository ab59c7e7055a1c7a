package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/audit/audittest"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/policy/internal/api"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// auditServices are the services a policy server serves: api.Register's (the app's one
// registration) and the AuditService pkg/server registers beside them.
func auditServices() []string {
	return append(audittest.Services(func(gs *grpc.Server) { api.Register(gs, api.Deps{}) }),
		auditv1.AuditService_ServiceDesc.ServiceName)
}

// Every RPC policy serves is recorded or left out with a reason, and no secret-looking field
// is recorded in clear.
func TestAuditRulesComplete(t *testing.T) {
	audittest.Complete(t, api.AuditRules(), auditServices()...)
	audittest.Redacted(t, auditServices()...)
}

const auditKey = "test-audit-key-0123456789abcdef-0123456789"

// auditConfig is the trail's configuration in these tests: a key (secrets as keyed hashes),
// every decision its own event (no repeat window: the tests count events), and failOpen.
func auditConfig(failOpen string) *server.AuditConfig {
	return &server.AuditConfig{Key: auditKey, Window: -1, FailOpen: failOpen}
}

// inlineFlow is a flow with inline code in its failure module: refused to an operator
// (INLINE_CODE at /failure_module/value).
const inlineFlow = `{"modules":[],"failure_module":{"id":"f","value":{"type":"rawscript","content":"x","language":"bun"}}}`

// auditOf lists policy's trail (as the superadmin) selected by req.
func auditOf(t testing.TB, r *replica, req *auditv1.ListAuditEventsRequest) []*auditv1.AuditEvent {
	t.Helper()
	return servicetest.AuditEvents(t, admin, auditv1.NewAuditServiceClient(r.conn), req)
}

// Over gRPC: a refused builder check, a settings change and an issued token each leave their
// event, the token only as its keyed hash.
func TestAuditRecordsDecisions(t *testing.T) {
	r := startReplica(t, testdb.DSN(t), replicaOpts{audit: auditConfig(server.DefaultAuditFailOpen)})
	workspaceWith(t, r, "w")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)
	setBuilder(t, r, "w", true)

	t.Run("refused builder check", func(t *testing.T) {
		_, err := checkFlow(r, service, "w", "op", inlineFlow)
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_INLINE_CODE)
		events := auditOf(t, r, &auditv1.ListAuditEventsRequest{Rpc: policyv1.BuilderService_CheckFlow_FullMethodName})
		require.Len(t, events, 1)
		e := events[0]
		require.Equal(t, "builder", e.GetClass())
		require.Equal(t, "refused", e.GetOutcome())
		require.Equal(t, "PermissionDenied", e.GetCode())
		require.Equal(t, "ERROR_REASON_INLINE_CODE", e.GetRule())
		require.Equal(t, "/failure_module/value", e.GetPointer())
		require.Equal(t, "w", e.GetWorkspace())
		require.Equal(t, "op", e.GetOnBehalfOf())
		require.Equal(t, "service", e.GetActorKind())
		require.Equal(t, "policy", e.GetService())
	})

	t.Run("settings change", func(t *testing.T) {
		events := auditOf(t, r, &auditv1.ListAuditEventsRequest{Rpc: policyv1.SettingsService_UpdateOperatorSettings_FullMethodName})
		require.Len(t, events, 2, "setBuilder: requested before the change, granted after it")
		for i, outcome := range []string{"requested", "granted"} {
			require.Equal(t, outcome, events[i].GetOutcome())
			require.Equal(t, "settings", events[i].GetClass())
			require.Equal(t, "w", events[i].GetWorkspace())
		}
	})

	t.Run("token issued", func(t *testing.T) {
		resp, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "w", Username: "op", Label: "audited",
			ExpiresAt: timestampIn(time.Hour)})
		require.NoError(t, err)
		token := resp.GetToken()
		events := auditOf(t, r, &auditv1.ListAuditEventsRequest{Rpc: policyv1.TokenService_CreateToken_FullMethodName})
		require.Len(t, events, 1)
		e := events[0]
		require.Equal(t, "credential", e.GetClass())
		require.Equal(t, "granted", e.GetOutcome())
		require.Equal(t, resp.GetTokenId(), e.GetDetails()["token_id"])
		h, err := auditv1.NewAuditServiceClient(r.conn).HashAuditValue(admin, &auditv1.HashAuditValueRequest{Value: token})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(h.GetHash(), "hmac-sha256:"), h.GetHash())
		require.Equal(t, h.GetHash(), e.GetDetails()["token"])

		// Nowhere in the trail in clear: not in any event's body, nor in any column.
		conn, err := pgx.Connect(context.Background(), r.dsn)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var n int
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT count(*) FROM audit_event WHERE strpos(audit_event::text, $1) > 0`, token).Scan(&n))
		require.Zero(t, n)
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT count(*) FROM audit_event WHERE strpos(body, $1) > 0`, e.GetDetails()["token"]).Scan(&n))
		require.Equal(t, 1, n, "the keyed hash is in the body")
	})
}

// requireAuditUnavailable asserts the refusal of a call whose event could not be written.
func requireAuditUnavailable(t testing.TB, err error) {
	t.Helper()
	requireCode(t, err, codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_AUDIT_UNAVAILABLE)
}

// When the trail cannot be written: settings changes, tokens and builder checks fail closed;
// the operator check (failing open by default) still answers; and with settings failing open
// the change is made.
func TestAuditFailsClosed(t *testing.T) {
	dsn := testdb.DSN(t)
	closed := startReplica(t, dsn, replicaOpts{audit: auditConfig(server.DefaultAuditFailOpen)})
	open := startReplica(t, dsn, replicaOpts{audit: auditConfig(server.DefaultAuditFailOpen + ",settings")})
	workspaceWith(t, closed, "w")
	member(t, closed, "w", "op", policyv1.Role_ROLE_OPERATOR)
	setBuilder(t, closed, "w", true)
	builderOn := func(r *replica) bool {
		t.Helper()
		s, err := r.set.GetOperatorSettings(admin, &policyv1.GetOperatorSettingsRequest{Workspace: "w"})
		require.NoError(t, err)
		return s.GetSettings().GetBuilder()
	}
	off := false
	turnOff := &policyv1.UpdateOperatorSettingsRequest{Workspace: "w", Patch: &policyv1.OperatorSettingsPatch{Builder: &off}}

	servicetest.BreakAudit(t, dsn)

	_, err := closed.set.UpdateOperatorSettings(admin, turnOff)
	requireAuditUnavailable(t, err)
	require.True(t, builderOn(closed), "a settings change whose event cannot be written is not made")

	resp, err := closed.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "w", Username: "op", ExpiresAt: timestampIn(time.Hour)})
	requireAuditUnavailable(t, err)
	require.Empty(t, resp.GetToken(), "no token issued")

	_, err = checkFlow(closed, service, "w", "op", `{"modules":[]}`)
	requireAuditUnavailable(t, err)

	_, err = closed.set.CheckOperatorCanBuild(service, &policyv1.CheckOperatorCanBuildRequest{Workspace: "w", Username: "op"})
	require.NoError(t, err, "the operator check fails open by default")

	_, err = open.set.UpdateOperatorSettings(admin, turnOff)
	require.NoError(t, err, "--audit-fail-open with settings: the change is made, its event logged instead")
	require.False(t, builderOn(open))
}

// ListAuditEvents selects by workspace, actor, outcome, rule, object, class, rpc and time, and
// pages: each filter answers exactly the events of the whole trail that match it.
func TestListAuditEventsFilters(t *testing.T) {
	r := startReplica(t, testdb.DSN(t), replicaOpts{audit: auditConfig(server.DefaultAuditFailOpen)})
	workspaceWith(t, r, "w1", "w2")
	member(t, r, "w1", "op", policyv1.Role_ROLE_OPERATOR)
	setBuilder(t, r, "w1", true)
	_, err := r.ws.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: "w2", Name: "g1", Members: []string{"admin"}})
	require.NoError(t, err)
	_, err = checkFlow(r, service, "w1", "op", inlineFlow)
	require.Error(t, err)
	time.Sleep(10 * time.Millisecond) // a time boundary between the events before and after it
	mid := time.Now()
	time.Sleep(10 * time.Millisecond)
	op := as(userToken(t, r, "w1", "op"))
	_, err = r.set.UpdateOperatorSettings(op, &policyv1.UpdateOperatorSettingsRequest{Workspace: "w1",
		Patch: &policyv1.OperatorSettingsPatch{Builder: bptr(false)}})
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
	_, err = r.set.CheckOperatorCanBuild(op, &policyv1.CheckOperatorCanBuildRequest{Workspace: "w1"})
	require.NoError(t, err)

	all := auditOf(t, r, &auditv1.ListAuditEventsRequest{})
	for _, tc := range []struct {
		name  string
		req   *auditv1.ListAuditEventsRequest
		match func(*auditv1.AuditEvent) bool
	}{
		{"workspace", &auditv1.ListAuditEventsRequest{Workspace: "w2"}, func(e *auditv1.AuditEvent) bool { return e.GetWorkspace() == "w2" }},
		{"actor", &auditv1.ListAuditEventsRequest{Actor: "op"}, func(e *auditv1.AuditEvent) bool { return e.GetActor() == "op" }},
		{"outcome", &auditv1.ListAuditEventsRequest{Outcome: "refused"}, func(e *auditv1.AuditEvent) bool { return e.GetOutcome() == "refused" }},
		{"rule", &auditv1.ListAuditEventsRequest{Rule: "ERROR_REASON_ROLE_NOT_ALLOWED"},
			func(e *auditv1.AuditEvent) bool { return e.GetRule() == "ERROR_REASON_ROLE_NOT_ALLOWED" }},
		{"object", &auditv1.ListAuditEventsRequest{Object: "name=g1"}, func(e *auditv1.AuditEvent) bool { return strings.Contains(e.GetObject(), "name=g1") }},
		{"class", &auditv1.ListAuditEventsRequest{Class: "settings"}, func(e *auditv1.AuditEvent) bool { return e.GetClass() == "settings" }},
		{"rpc", &auditv1.ListAuditEventsRequest{Rpc: policyv1.TokenService_CreateToken_FullMethodName},
			func(e *auditv1.AuditEvent) bool {
				return e.GetRpc() == policyv1.TokenService_CreateToken_FullMethodName
			}},
		{"since", &auditv1.ListAuditEventsRequest{StartTime: timestamppb.New(mid)}, func(e *auditv1.AuditEvent) bool { return !e.GetTime().AsTime().Before(mid) }},
		{"until", &auditv1.ListAuditEventsRequest{EndTime: timestamppb.New(mid)}, func(e *auditv1.AuditEvent) bool { return e.GetTime().AsTime().Before(mid) }},
		{"combined", &auditv1.ListAuditEventsRequest{Workspace: "w1", Class: "settings", Outcome: "refused"},
			func(e *auditv1.AuditEvent) bool {
				return e.GetWorkspace() == "w1" && e.GetClass() == "settings" && e.GetOutcome() == "refused"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []int64
			for _, e := range all {
				if tc.match(e) {
					want = append(want, e.GetSeq())
				}
			}
			require.NotEmpty(t, want, "the trail holds events this filter selects")
			require.Less(t, len(want), len(all), "and events it leaves out")
			var got []int64
			for _, e := range auditOf(t, r, tc.req) {
				got = append(got, e.GetSeq())
			}
			require.Equal(t, want, got)
		})
	}

	t.Run("paging", func(t *testing.T) {
		require.Greater(t, len(all), 4)
		c := auditv1.NewAuditServiceClient(r.conn)
		var got []*auditv1.AuditEvent
		req := &auditv1.ListAuditEventsRequest{PageSize: 2}
		for pages := 1; ; pages++ {
			resp, err := c.ListAuditEvents(admin, req)
			require.NoError(t, err)
			require.LessOrEqual(t, len(resp.GetEvents()), 2)
			got = append(got, resp.GetEvents()...)
			if resp.GetNextPageToken() == "" {
				require.Equal(t, (len(all)+1)/2, pages)
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		require.Len(t, got, len(all))
		for i := range all {
			require.Equal(t, all[i].GetSeq(), got[i].GetSeq())
			require.Equal(t, int64(i+1), got[i].GetSeq(), "the chain has no gap")
		}
	})

	t.Run("superadmin only", func(t *testing.T) {
		_, err := auditv1.NewAuditServiceClient(r.conn).ListAuditEvents(service, &auditv1.ListAuditEventsRequest{})
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
	})
}
