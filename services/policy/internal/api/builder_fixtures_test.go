package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	bf "github.com/millwright/millwright/pkg/builderfixture"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// The builder fixtures (services/policy/internal/builder/testdata, format in its README) are
// replayed here over gRPC against the real service and real Postgres; gateway/e2e replays the
// same files over REST through the real gateway. Both compare against the files, so both
// transports reach identical decisions (codes, reasons, docs, pointers). The reading of the files
// and the check of an answer are shared, in pkg/builderfixture.

const fixtureDir = "../builder/testdata"

// grpcCall makes the case's call with the service token acting for the case's caller.
func grpcCall(t testing.TB, r *replica, c bf.Case) bf.Outcome {
	t.Helper()
	ws := c.Workspace
	if ws == "" {
		ws = "bw"
	}
	var o bf.Outcome
	var err error
	switch c.RPC {
	case "flow":
		action := policyv1.FlowAction_FLOW_ACTION_SAVE
		if c.Action != "" {
			action = policyv1.FlowAction(policyv1.FlowAction_value["FLOW_ACTION_"+c.Action])
		}
		var resp *policyv1.CheckFlowResponse
		resp, err = policyv1.NewBuilderServiceClient(r.conn).CheckFlow(service, &policyv1.CheckFlowRequest{
			Workspace: ws, OnBehalfOf: c.Caller, Action: action, FlowJson: bf.FlowText(c)})
		if err == nil {
			o.Refs, o.CodeFindings = bf.FlowRefs(resp), bf.FindingsOf(resp.GetCodeFindings())
		}
	case "app":
		var resp *policyv1.CheckAppResponse
		resp, err = policyv1.NewBuilderServiceClient(r.conn).CheckApp(service, &policyv1.CheckAppRequest{
			Workspace: ws, OnBehalfOf: c.Caller, AppValueJson: string(c.Value), PolicyJson: string(c.Policy),
			DeployPath: policyv1.DeployPath(policyv1.DeployPath_value["DEPLOY_PATH_"+c.DeployPath]), CallerScopes: c.CallerScopes})
		if err == nil {
			o.Refs, o.CodeFindings, o.NormalizedPolicy = bf.AppRefs(resp), bf.FindingsOf(resp.GetCodeFindings()), resp.GetNormalizedPolicyJson()
		}
	case "preview":
		req := &policyv1.CheckPreviewRequest{Workspace: ws, OnBehalfOf: c.Caller}
		if c.RawCode != nil {
			req.Target = &policyv1.CheckPreviewRequest_RawCode{RawCode: *c.RawCode}
		} else {
			req.Target = &policyv1.CheckPreviewRequest_Path{Path: *c.Path}
		}
		_, err = policyv1.NewBuilderServiceClient(r.conn).CheckPreview(service, req)
	default:
		t.Fatalf("unknown rpc %q", c.RPC)
	}
	o.Code = bf.CodeName(status.Code(err))
	o.Violations = bf.ViolationsOf(err)
	return o
}

// setupBuilder applies the fixture setup over gRPC.
func setupBuilder(t testing.TB, r *replica, s bf.Setup) {
	t.Helper()
	ctx := admin
	for _, w := range s.Workspaces {
		workspaceWith(t, r, w.Name)
		for _, m := range s.Members {
			member(t, r, w.Name, m.Username, policyv1.Role(policyv1.Role_value["ROLE_"+strings.ToUpper(m.Role)]))
		}
		b, strip := w.Builder, w.Strip
		_, err := r.set.UpdateOperatorSettings(ctx, &policyv1.UpdateOperatorSettingsRequest{Workspace: w.Name,
			Patch: &policyv1.OperatorSettingsPatch{Builder: &b, StripBuilderSdkReadScopes: &strip}})
		require.NoError(t, err)
		var tags []*policyv1.WorkerTag
		for _, tg := range s.Tags {
			tags = append(tags, &policyv1.WorkerTag{Name: tg.Name, Privileged: tg.Privileged})
		}
		_, err = r.tags.SetWorkerTags(ctx, &policyv1.SetWorkerTagsRequest{Workspace: w.Name, Tags: tags})
		require.NoError(t, err)
		for _, sc := range s.Scripts {
			_, err := r.cat.RegisterScript(ctx, &policyv1.RegisterScriptRequest{Workspace: w.Name, Path: sc.Path,
				LatestHash: sc.Hashes[0], VersionHashes: sc.Hashes, ExtraPerms: bf.Readers(sc.Readers)})
			require.NoError(t, err, sc.Path)
		}
		for _, f := range s.Flows {
			_, err := r.cat.RegisterFlow(ctx, &policyv1.RegisterFlowRequest{Workspace: w.Name, Path: f.Path, ExtraPerms: bf.Readers(f.Readers)})
			require.NoError(t, err, f.Path)
		}
	}
}

func TestBuilderFixturesGRPC(t *testing.T) {
	sf, cases := bf.Load(t, fixtureDir)
	r := startReplica(t, testdb.DSN(t))
	setupBuilder(t, r, sf.Setup)
	require.Greater(t, len(cases), 100)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			bf.Check(t, c, grpcCall(t, r, c))
		})
	}
}
