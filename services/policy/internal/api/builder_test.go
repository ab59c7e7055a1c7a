package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/policy/internal/builder"
	"github.com/millwright/millwright/services/policy/internal/builder/buildertest"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// calledBy keeps the statements run on behalf of one gRPC method (BEGIN/COMMIT included),
// recognised by the handler context pgx hands the tracer.
func calledBy(method string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		m, ok := grpc.Method(ctx)
		return ok && m == method
	}
}

// benchWorkspace registers what buildertest.Flow(n, distinct) references: every path readable by the
// operator through folder f/bench, every pin a version of its own path, tag gpu.
func benchWorkspace(t testing.TB, r *replica, ws string, n, distinct int) {
	t.Helper()
	workspaceWith(t, r, ws)
	member(t, r, ws, "op", policyv1.Role_ROLE_OPERATOR)
	setBuilder(t, r, ws, true)
	_, err := r.ws.UpsertFolder(admin, &policyv1.UpsertFolderRequest{Workspace: ws, Name: "bench", Readers: []string{"u/op"}})
	require.NoError(t, err)
	_, err = r.tags.SetWorkerTags(admin, &policyv1.SetWorkerTagsRequest{Workspace: ws, Tags: []*policyv1.WorkerTag{{Name: "gpu"}}})
	require.NoError(t, err)
	versions := make([][]string, distinct)
	for step := 0; step < n; step += 10 {
		versions[step%distinct] = append(versions[step%distinct], fmt.Sprintf("%016x", step))
	}
	for k := 0; k < distinct; k++ {
		latest := fmt.Sprintf("f%015x", k)
		_, err := r.cat.RegisterScript(admin, &policyv1.RegisterScriptRequest{Workspace: ws, Path: fmt.Sprintf("f/bench/script_%d", k),
			LatestHash: latest, VersionHashes: append([]string{latest}, versions[k]...)})
		require.NoError(t, err)
	}
}

func checkFlow(r *replica, ctx context.Context, ws, who, flow string) (*policyv1.CheckFlowResponse, error) {
	return policyv1.NewBuilderServiceClient(r.conn).CheckFlow(ctx, &policyv1.CheckFlowRequest{Workspace: ws, OnBehalfOf: who,
		Action: policyv1.FlowAction_FLOW_ACTION_SAVE, FlowJson: flow}, grpc.MaxCallSendMsgSize(8<<20))
}

// The number of queries of a check does not depend on the flow's size: one tenancy read, one
// cached settings read, one tag-rules read, one RLS transaction for every path, one pin query.
func TestBuilderConstantQueries(t *testing.T) {
	qc := &pgtest.Statements{Only: calledBy(policyv1.BuilderService_CheckFlow_FullMethodName)}
	r := startReplica(t, testdb.DSN(t), replicaOpts{tracer: qc})
	benchWorkspace(t, r, "bench", 10_000, 1_000)
	var counts []int64
	for _, size := range []struct{ n, distinct int }{{40, 1_000}, {400, 1_000}, {10_000, 1_000}} {
		flow := string(buildertest.Flow(size.n, size.distinct))
		_, err := checkFlow(r, service, "bench", "op", flow) // warms the settings cache
		require.NoError(t, err)
		qc.Take()
		resp, err := checkFlow(r, service, "bench", "op", flow)
		require.NoError(t, err)
		// Every step is checked; the answer lists at most 1,000 (builder.proto) and counts the rest.
		require.Len(t, resp.GetRunnables(), min(size.n, 1000))
		require.EqualValues(t, size.n-min(size.n, 1000), resp.GetRunnablesOmitted())
		sqls := qc.Take()
		n := int64(len(sqls))
		t.Logf("%d steps: %d statements: %q", size.n, n, oneLine(sqls))
		counts = append(counts, n)
	}
	require.Equal(t, counts[0], counts[1])
	require.Equal(t, counts[0], counts[2])
	require.LessOrEqual(t, counts[0], int64(16), "statements per check, BEGIN/COMMIT included")
}

// oneLine folds each statement's white space, for the log.
func oneLine(sqls []string) []string {
	out := make([]string, len(sqls))
	for i, s := range sqls {
		out[i] = strings.Join(strings.Fields(s), " ")
	}
	return out
}

func TestBuilderCallerModel(t *testing.T) {
	r := replicaWith(t, "w", "other")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)
	member(t, r, "w", "op2", policyv1.Role_ROLE_OPERATOR)
	setBuilder(t, r, "w", true)
	_, err := r.cat.RegisterScript(admin, &policyv1.RegisterScriptRequest{Workspace: "w", Path: "u/op/mine",
		LatestHash: "00000000000000a1", VersionHashes: []string{"00000000000000a1"}})
	require.NoError(t, err)
	mine := `{"modules":[{"id":"a","value":{"type":"script","path":"u/op/mine","input_transforms":{}}}]}`
	bc := policyv1.NewBuilderServiceClient(r.conn)
	op := userToken(t, r, "w", "op", "catalog:read")
	op2 := userToken(t, r, "w", "op2", "catalog:read")
	unscoped := userToken(t, r, "w", "op", "workspace:read")

	// A user token acts for itself: its own path passes, the other operator's does not.
	_, err = checkFlow(r, as(op), "w", "", mine)
	require.NoError(t, err)
	_, err = checkFlow(r, as(op), "w", "op", mine)
	require.NoError(t, err)
	_, err = checkFlow(r, as(op2), "w", "", mine)
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_PATH_NOT_READABLE)
	// It may not act for someone else, nor in another workspace, nor without the scope.
	_, err = checkFlow(r, as(op2), "w", "op", mine)
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
	_, err = checkFlow(r, as(op), "other", "", mine)
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE)
	_, err = checkFlow(r, as(unscoped), "w", "", mine)
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MISSING_SCOPE)
	// Only the service token reports the credential's scopes; a user token's own are used.
	_, err = bc.CheckApp(as(op), &policyv1.CheckAppRequest{Workspace: "w", AppValueJson: `{}`,
		DeployPath: policyv1.DeployPath_DEPLOY_PATH_MULTIPART, CallerScopes: []string{"*"}})
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
	// The service token must name the user; a non-member is NotFound, never a yes.
	_, err = checkFlow(r, service, "w", "", mine)
	requireField(t, err, "username")
	_, err = checkFlow(r, service, "w", "nobody", mine)
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
	_, err = checkFlow(r, service, "w", "op", mine)
	require.NoError(t, err)
	// A disabled member is refused.
	_, err = r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "op2", Email: "op2@x",
		Role: policyv1.Role_ROLE_OPERATOR, Disabled: true})
	if err == nil {
		_, err = checkFlow(r, service, "w", "op2", mine)
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MEMBER_DISABLED)
	}

	// Envelope validation.
	_, err = bc.CheckFlow(service, &policyv1.CheckFlowRequest{Workspace: "w", OnBehalfOf: "op", FlowJson: mine})
	requireField(t, err, "action")
	// No deploy path is the value path (create_app), never the source path an operator may
	// not use: the same answer as VALUE, and SOURCE refused.
	app := func(dp policyv1.DeployPath) (*policyv1.CheckAppResponse, error) {
		return bc.CheckApp(service, &policyv1.CheckAppRequest{Workspace: "w", OnBehalfOf: "op", AppValueJson: `{}`,
			DeployPath: dp, CallerScopes: []string{"*"}})
	}
	unset, err := app(policyv1.DeployPath_DEPLOY_PATH_UNSPECIFIED)
	require.NoError(t, err)
	value, err := app(policyv1.DeployPath_DEPLOY_PATH_VALUE)
	require.NoError(t, err)
	require.True(t, proto.Equal(value, unset), "unset answers as VALUE: %v, %v", unset, value)
	_, err = app(policyv1.DeployPath_DEPLOY_PATH_SOURCE)
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_SOURCE_DEPLOY)
	_, err = app(policyv1.DeployPath(42))
	requireField(t, err, "deploy_path")
	_, err = bc.CheckPreview(service, &policyv1.CheckPreviewRequest{Workspace: "w", OnBehalfOf: "op"})
	requireField(t, err, "target")

	// Size: over the service's 3 MiB document limit is VALUE_TOO_LARGE, named by field.
	big := `{"modules":[],"pad":"` + strings.Repeat("x", builder.DefaultLimits().MaxBytes*3/4+1) + `"}`
	_, err = checkFlow(r, service, "w", "op", big)
	requireCode(t, err, codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_VALUE_TOO_LARGE)
	_, err = bc.CheckApp(service, &policyv1.CheckAppRequest{Workspace: "w", OnBehalfOf: "op", AppValueJson: big,
		DeployPath: policyv1.DeployPath_DEPLOY_PATH_MULTIPART}, grpc.MaxCallSendMsgSize(8<<20))
	requireCode(t, err, codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_VALUE_TOO_LARGE)
}

// BenchmarkBuilderCheckFlow10k is the end-to-end check (gRPC client -> real server -> walk ->
// tags, one RLS query for the 1,000 distinct paths, one pin query -> response with 10,000
// references) of a 10,000-step flow. Baselines measured in the same run, same payload:
//   - BareCall: the same request for a member that does not exist: transport, unmarshal,
//     authentication and one tenancy query, no walk;
//   - Walk: builder.WalkFlow alone, in process.
func BenchmarkBuilderCheckFlow10k(b *testing.B) {
	r := startReplica(b, testdb.DSN(b))
	benchWorkspace(b, r, "bench", 10_000, 1_000)
	raw := buildertest.Flow(10_000, 1_000)
	flow := string(raw)
	b.Logf("payload %d bytes", len(raw))
	b.Run("EndToEnd", func(b *testing.B) {
		_, err := checkFlow(r, service, "bench", "op", flow)
		require.NoError(b, err)
		b.SetBytes(int64(len(raw)))
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			resp, err := checkFlow(r, service, "bench", "op", flow)
			if err != nil || len(resp.GetRunnables()) != 1000 || resp.GetRunnablesOmitted() != 9000 { // the first 1,000 are listed
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/op")
	})
	b.Run("BareCall", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := checkFlow(r, service, "bench", "nobody", flow); err == nil {
				b.Fatal("a non-member was answered")
			}
		}
	})
	b.Run("Walk", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for i := 0; i < b.N; i++ {
			if _, err := builder.WalkFlow(raw, builder.Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
