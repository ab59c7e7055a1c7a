package e2e

// This file replays the operator-builder fixtures (services/policy/internal/builder/testdata)
// over REST through the real gateway of a real stack, and over gRPC against the same stack's
// policy service, and requires both to match the fixture and each other. Reading the fixtures and
// checking answers is pkg/builderfixture, shared with services/policy/internal/api.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	bf "github.com/millwright/millwright/pkg/builderfixture"
	"github.com/millwright/millwright/pkg/errs"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

const fixtureDir = "../../services/policy/internal/builder/testdata"

// builderClient drives one stack: gRPC straight to policy, REST through the gateway, both with
// the superadmin token acting for the case's caller (on_behalf_of).
type builderClient struct {
	conn  *grpc.ClientConn
	ctx   context.Context
	http  string
	token string
}

func (b *builderClient) setup(t *testing.T, s bf.Setup) {
	t.Helper()
	ws := policyv1.NewWorkspaceServiceClient(b.conn)
	set := policyv1.NewSettingsServiceClient(b.conn)
	tags := policyv1.NewTagServiceClient(b.conn)
	cat := policyv1.NewCatalogServiceClient(b.conn)
	for _, w := range s.Workspaces {
		_, err := ws.CreateWorkspace(b.ctx, &policyv1.CreateWorkspaceRequest{Workspace: w.Name, Name: w.Name, AdminEmail: "admin@x", AdminUsername: "admin"})
		require.NoError(t, err)
		for _, m := range s.Members {
			_, err := ws.UpsertMember(b.ctx, &policyv1.UpsertMemberRequest{Workspace: w.Name, Username: m.Username, Email: m.Username + "@x",
				Role: policyv1.Role(policyv1.Role_value["ROLE_"+strings.ToUpper(m.Role)])})
			require.NoError(t, err)
		}
		bu, strip := w.Builder, w.Strip
		_, err = set.UpdateOperatorSettings(b.ctx, &policyv1.UpdateOperatorSettingsRequest{Workspace: w.Name,
			Patch: &policyv1.OperatorSettingsPatch{Builder: &bu, StripBuilderSdkReadScopes: &strip}})
		require.NoError(t, err)
		var tl []*policyv1.WorkerTag
		for _, tg := range s.Tags {
			tl = append(tl, &policyv1.WorkerTag{Name: tg.Name, Privileged: tg.Privileged})
		}
		_, err = tags.SetWorkerTags(b.ctx, &policyv1.SetWorkerTagsRequest{Workspace: w.Name, Tags: tl})
		require.NoError(t, err)
		for _, sc := range s.Scripts {
			_, err := cat.RegisterScript(b.ctx, &policyv1.RegisterScriptRequest{Workspace: w.Name, Path: sc.Path,
				LatestHash: sc.Hashes[0], VersionHashes: sc.Hashes, ExtraPerms: bf.Readers(sc.Readers)})
			require.NoError(t, err, sc.Path)
		}
		for _, f := range s.Flows {
			_, err := cat.RegisterFlow(b.ctx, &policyv1.RegisterFlowRequest{Workspace: w.Name, Path: f.Path, ExtraPerms: bf.Readers(f.Readers)})
			require.NoError(t, err, f.Path)
		}
	}
}

// request builds the case's request message and the REST route it is posted to.
func (b *builderClient) request(c bf.Case) (proto.Message, string) {
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
		return &policyv1.CheckFlowRequest{Workspace: ws, OnBehalfOf: c.Caller, Action: action, FlowJson: bf.FlowText(c)}, base + "flows:check"
	case "app":
		return &policyv1.CheckAppRequest{Workspace: ws, OnBehalfOf: c.Caller, AppValueJson: string(c.Value), PolicyJson: string(c.Policy),
			DeployPath: policyv1.DeployPath(policyv1.DeployPath_value["DEPLOY_PATH_"+c.DeployPath]), CallerScopes: c.CallerScopes}, base + "apps:check"
	default:
		req := &policyv1.CheckPreviewRequest{Workspace: ws, OnBehalfOf: c.Caller}
		if c.RawCode != nil {
			req.Target = &policyv1.CheckPreviewRequest_RawCode{RawCode: *c.RawCode}
		} else {
			req.Target = &policyv1.CheckPreviewRequest_Path{Path: *c.Path}
		}
		return req, base + "preview:check"
	}
}

func outcomeOf(resp proto.Message) bf.Outcome {
	var o bf.Outcome
	switch r := resp.(type) {
	case *policyv1.CheckFlowResponse:
		o.Refs, o.CodeFindings = bf.FlowRefs(r), bf.FindingsOf(r.GetCodeFindings())
	case *policyv1.CheckAppResponse:
		o.Refs, o.CodeFindings, o.NormalizedPolicy = bf.AppRefs(r), bf.FindingsOf(r.GetCodeFindings()), r.GetNormalizedPolicyJson()
	}
	return o
}

func (b *builderClient) grpc(t *testing.T, c bf.Case) bf.Outcome {
	t.Helper()
	req, _ := b.request(c)
	bc := policyv1.NewBuilderServiceClient(b.conn)
	var resp proto.Message
	var err error
	switch r := req.(type) {
	case *policyv1.CheckFlowRequest:
		resp, err = bc.CheckFlow(b.ctx, r)
	case *policyv1.CheckAppRequest:
		resp, err = bc.CheckApp(b.ctx, r)
	case *policyv1.CheckPreviewRequest:
		resp, err = bc.CheckPreview(b.ctx, r)
	}
	o := bf.Outcome{}
	if err == nil {
		o = outcomeOf(resp)
	}
	o.Code, o.Violations = bf.CodeName(status.Code(err)), bf.ViolationsOf(err)
	return o
}

// rest posts the request as REST clients do: protojson with the documents as JSON strings.
func (b *builderClient) rest(t *testing.T, c bf.Case) bf.Outcome {
	t.Helper()
	req, route := b.request(c)
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
	require.NoError(t, err)
	hr, err := http.NewRequest(http.MethodPost, b.http+route, bytes.NewReader(body))
	require.NoError(t, err)
	hr.Header.Set("Authorization", "Bearer "+b.token)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusOK {
		var msg proto.Message
		switch req.(type) {
		case *policyv1.CheckFlowRequest:
			msg = &policyv1.CheckFlowResponse{}
		case *policyv1.CheckAppRequest:
			msg = &policyv1.CheckAppResponse{}
		default:
			msg = &policyv1.CheckPreviewResponse{}
		}
		require.NoError(t, protojson.Unmarshal(raw, msg), string(raw))
		o := outcomeOf(msg)
		o.Code, o.Violations = "OK", []bf.V{}
		return o
	}
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type     string            `json:"@type"`
			Reason   string            `json:"reason"`
			Domain   string            `json:"domain"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	require.NoError(t, json.Unmarshal(raw, &st), string(raw))
	o := bf.Outcome{Code: bf.CodeName(codes.Code(st.Code)), Violations: []bf.V{}}
	for _, d := range st.Details {
		if d.Type != "type.googleapis.com/google.rpc.ErrorInfo" || d.Domain != errs.Domain {
			continue
		}
		o.Violations = append(o.Violations, bf.V{Reason: strings.TrimPrefix(d.Reason, "ERROR_REASON_"), Doc: d.Metadata["doc"], Pointer: d.Metadata["pointer"]})
	}
	return o
}

func TestBuilderFixturesREST(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack; skipped with -short")
	}
	sf, cases := bf.Load(t, fixtureDir)
	st := StartStack(t)
	conn, err := grpc.NewClient(st.Policy, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	token := st.AdminToken(t)
	b := &builderClient{conn: conn, http: st.HTTP, token: token,
		ctx: metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)}
	// The stack loads a demo with a small licensed seat cap; these workspaces need more seats.
	hr, err := http.NewRequest(http.MethodPut, st.HTTP+"/v1/billing/cap", strings.NewReader(`{"seats":"0"}`))
	require.NoError(t, err)
	hr.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(hr)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	b.setup(t, sf.Setup)
	require.Greater(t, len(cases), 100)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := b.rest(t, c)
			bf.Check(t, c, r)
			g := b.grpc(t, c)
			g.CodeFindings, r.CodeFindings = bf.OrNone(g.CodeFindings), bf.OrNone(r.CodeFindings)
			assert.Equal(t, g, r, "REST and gRPC must reach the same decision")
		})
	}
}
