package builderfixture

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// Apply creates every workspace of the setup through policy's API (ctx carries a superadmin
// token) and fills it: members, operator settings, worker tags, scripts and flows.
func Apply(t testing.TB, ctx context.Context, conn grpc.ClientConnInterface, s Setup) {
	t.Helper()
	ws := policyv1.NewWorkspaceServiceClient(conn)
	set := policyv1.NewSettingsServiceClient(conn)
	tags := policyv1.NewTagServiceClient(conn)
	cat := policyv1.NewCatalogServiceClient(conn)
	var tl []*policyv1.WorkerTag
	for _, tg := range s.Tags {
		tl = append(tl, &policyv1.WorkerTag{Name: tg.Name, Privileged: tg.Privileged})
	}
	for _, w := range s.Workspaces {
		_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: w.Name, Name: w.Name,
			AdminEmail: "admin@x", AdminUsername: "admin"})
		require.NoError(t, err, w.Name)
		for _, m := range s.Members {
			_, err := ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: w.Name, Username: m.Username,
				Email: m.Username + "@x", Role: policyv1.Role(policyv1.Role_value["ROLE_"+strings.ToUpper(m.Role)])})
			require.NoError(t, err, m.Username)
		}
		builder, strip := w.Builder, w.Strip
		_, err = set.UpdateOperatorSettings(ctx, &policyv1.UpdateOperatorSettingsRequest{Workspace: w.Name,
			Patch: &policyv1.OperatorSettingsPatch{Builder: &builder, StripBuilderSdkReadScopes: &strip}})
		require.NoError(t, err)
		_, err = tags.SetWorkerTags(ctx, &policyv1.SetWorkerTagsRequest{Workspace: w.Name, Tags: tl})
		require.NoError(t, err)
		for _, sc := range s.Scripts {
			_, err := cat.RegisterScript(ctx, &policyv1.RegisterScriptRequest{Workspace: w.Name, Path: sc.Path,
				LatestHash: sc.Hashes[0], VersionHashes: sc.Hashes, ExtraPerms: readers(sc.Readers)})
			require.NoError(t, err, sc.Path)
		}
		for _, f := range s.Flows {
			_, err := cat.RegisterFlow(ctx, &policyv1.RegisterFlowRequest{Workspace: w.Name, Path: f.Path,
				ExtraPerms: readers(f.Readers)})
			require.NoError(t, err, f.Path)
		}
	}
}

// readers turns principals into extra read permissions.
func readers(ps []string) []*policyv1.ExtraPerm {
	var out []*policyv1.ExtraPerm
	for _, p := range ps {
		out = append(out, &policyv1.ExtraPerm{Principal: p})
	}
	return out
}

// Request builds the case's request message and the REST route the gateway serves it on.
func Request(c Case) (proto.Message, string) {
	ws := c.Workspace
	if ws == "" {
		ws = "bw"
	}
	base := "/v1/workspaces/" + ws + "/builder/"
	switch c.RPC {
	case "flow":
		action := policyv1.FlowAction_FLOW_ACTION_SAVE
		if c.Action != "" {
			action = policyv1.FlowAction(policyv1.FlowAction_value["FLOW_ACTION_"+c.Action])
		}
		flow := string(c.Flow)
		if c.FlowText != nil {
			flow = *c.FlowText
		}
		return &policyv1.CheckFlowRequest{Workspace: ws, OnBehalfOf: c.Caller, Action: action, FlowJson: flow}, base + "flows:check"
	case "app":
		return &policyv1.CheckAppRequest{Workspace: ws, OnBehalfOf: c.Caller, AppValueJson: string(c.Value),
			PolicyJson: string(c.Policy), CallerScopes: c.CallerScopes,
			DeployPath: policyv1.DeployPath(policyv1.DeployPath_value["DEPLOY_PATH_"+c.DeployPath])}, base + "apps:check"
	case "preview":
		req := &policyv1.CheckPreviewRequest{Workspace: ws, OnBehalfOf: c.Caller}
		if c.RawCode != nil {
			req.Target = &policyv1.CheckPreviewRequest_RawCode{RawCode: *c.RawCode}
		} else if c.Path != nil {
			req.Target = &policyv1.CheckPreviewRequest_Path{Path: *c.Path}
		}
		return req, base + "preview:check"
	}
	return nil, ""
}

// Call makes the case's call over gRPC (ctx carries the token acting for the case's caller) and
// returns its outcome.
func Call(t testing.TB, ctx context.Context, conn grpc.ClientConnInterface, c Case) Outcome {
	t.Helper()
	bc := policyv1.NewBuilderServiceClient(conn)
	var resp proto.Message
	var err error
	switch r := mustRequest(t, c).(type) {
	case *policyv1.CheckFlowRequest:
		resp, err = bc.CheckFlow(ctx, r)
	case *policyv1.CheckAppRequest:
		resp, err = bc.CheckApp(ctx, r)
	case *policyv1.CheckPreviewRequest:
		resp, err = bc.CheckPreview(ctx, r)
	}
	o := Outcome{}
	if err == nil {
		o = OutcomeOf(resp)
	}
	o.Code, o.Violations = CodeName(status.Code(err)), ViolationsOf(err)
	return o
}

func mustRequest(t testing.TB, c Case) proto.Message {
	t.Helper()
	req, _ := Request(c)
	require.NotNil(t, req, "case %q: unknown rpc %q", c.Name, c.RPC)
	return req
}

// ResponseFor is an empty answer message of the case's request, to decode a REST body into.
func ResponseFor(req proto.Message) proto.Message {
	switch req.(type) {
	case *policyv1.CheckFlowRequest:
		return &policyv1.CheckFlowResponse{}
	case *policyv1.CheckAppRequest:
		return &policyv1.CheckAppResponse{}
	}
	return &policyv1.CheckPreviewResponse{}
}

// OutcomeOf is the outcome of an OK answer (its code and violations left to the caller).
func OutcomeOf(resp proto.Message) Outcome {
	var o Outcome
	switch r := resp.(type) {
	case *policyv1.CheckFlowResponse:
		o.Refs, o.CodeFindings = FlowRefs(r), FindingsOf(r.GetCodeFindings())
	case *policyv1.CheckAppResponse:
		o.Refs, o.CodeFindings, o.NormalizedPolicy = AppRefs(r), FindingsOf(r.GetCodeFindings()), r.GetNormalizedPolicyJson()
	}
	return o
}

// ViolationsOf returns the ErrorInfo violations carried by a gRPC error (empty for nil).
func ViolationsOf(err error) []Violation {
	out := []Violation{}
	for _, info := range errs.Infos(err) {
		md := info.GetMetadata()
		out = append(out, Violation{Reason: strings.TrimPrefix(info.GetReason(), "ERROR_REASON_"), Doc: md["doc"], Pointer: md["pointer"]})
	}
	return out
}

// FindingsOf converts an answer's code findings.
func FindingsOf(fs []*policyv1.BuilderFinding) []Violation {
	out := []Violation{}
	for _, f := range fs {
		out = append(out, Violation{Reason: strings.TrimPrefix(f.GetReason(), "ERROR_REASON_"), Doc: f.GetDoc(), Pointer: f.GetPointer()})
	}
	return out
}

func runnablesOf(rs []*policyv1.BuilderRef) []Runnable {
	var out []Runnable
	for _, x := range rs {
		out = append(out, Runnable{Kind: strings.ToLower(strings.TrimPrefix(x.GetKind().String(), "RUNNABLE_KIND_")),
			Path: x.GetPath(), Pointer: x.GetPointer()})
	}
	return out
}

// FlowRefs lists a CheckFlow answer's references in the fixtures' form.
func FlowRefs(r *policyv1.CheckFlowResponse) []string {
	var tags []Tag
	for _, x := range r.GetTags() {
		tags = append(tags, Tag{Tag: x.GetTag(), Pointer: x.GetPointer()})
	}
	var pins []Pin
	for _, x := range r.GetPins() {
		pins = append(pins, Pin{Path: x.GetPath(), Hash: x.GetHash(), Pointer: x.GetPointer()})
	}
	return FlowRefStrings(runnablesOf(r.GetRunnables()), tags, pins)
}

// AppRefs lists a CheckApp answer's references and execution mode in the fixtures' form.
func AppRefs(r *policyv1.CheckAppResponse) []string {
	return AppRefStrings(runnablesOf(r.GetPolicyPaths()), runnablesOf(r.GetValuePaths()), r.GetExecutionMode())
}

// CodeName is the canonical upper-case name of a gRPC code (the REST runner reads the same
// names off the HTTP answer).
func CodeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	default:
		// No fixture expects another code: its Go name is enough to report the mismatch.
		return c.String()
	}
}
