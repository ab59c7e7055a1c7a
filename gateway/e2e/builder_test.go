package e2e

// This file replays the operator-builder fixtures (services/policy/internal/builder/testdata)
// over REST through the real gateway of a real stack, and over gRPC against the same stack's
// policy service, and requires both to match the fixture and each other. The fixture-reading
// helpers are a copy of services/policy/internal/api/builder_fixtures_test.go (another module's
// internal test code cannot be imported); keep them in step.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
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

	"github.com/millwright/millwright/pkg/errs"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

const fixtureDir = "../../services/policy/internal/builder/testdata"

type fxV struct {
	Reason  string `json:"reason"`
	Doc     string `json:"doc"`
	Pointer string `json:"pointer"`
}

type fxSetup struct {
	Members []struct {
		Username string `json:"username"`
		Role     string `json:"role"`
	} `json:"members"`
	Workspaces []struct {
		Name    string `json:"name"`
		Builder bool   `json:"builder"`
		Strip   bool   `json:"strip_builder_sdk_read_scopes"`
	} `json:"workspaces"`
	Scripts []struct {
		Path    string   `json:"path"`
		Hashes  []string `json:"hashes"`
		Readers []string `json:"readers"`
	} `json:"scripts"`
	Flows []struct {
		Path    string   `json:"path"`
		Readers []string `json:"readers"`
	} `json:"flows"`
	Tags []struct {
		Name       string `json:"name"`
		Privileged bool   `json:"privileged"`
	} `json:"tags"`
}

// fxCase is one call: a service case, or a walk fixture turned into one.
type fxCase struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	RPC          string          `json:"rpc"` // flow | app | preview
	Caller       string          `json:"caller"`
	Workspace    string          `json:"workspace"`
	Action       string          `json:"action"`
	Flow         json.RawMessage `json:"flow"`
	FlowText     *string         `json:"flow_text"`
	Value        json.RawMessage `json:"value"`
	Policy       json.RawMessage `json:"policy"`
	DeployPath   string          `json:"deploy_path"`
	CallerScopes []string        `json:"caller_scopes"`
	Path         *string         `json:"path"`
	RawCode      *string         `json:"raw_code"`
	Expect       fxExpect        `json:"expect"`
}

type fxExpect struct {
	Code             string          `json:"code"`
	Violations       []fxV           `json:"violations"`
	CodeFindings     []fxV           `json:"code_findings"`
	NormalizedPolicy json.RawMessage `json:"normalized_policy"`
	// Filled from walk fixtures: the references an allowed answer returns.
	Refs []string `json:"-"`
}

type serviceFixture struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Setup       fxSetup  `json:"setup"`
	Cases       []fxCase `json:"cases"`
}

func readJSON(t testing.TB, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(into), file)
}

func orNone[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// walkCases turns every walk fixture into the call an operator with builder rights makes, for
// whom (by the service setup) every referenced path, pin and tag is readable/available: the
// service's decision must then be exactly the value-only one.
func walkCases(t testing.TB, dir string) []fxCase {
	t.Helper()
	var out []fxCase
	files, _ := filepath.Glob(filepath.Join(dir, "flows", "*.json"))
	sort.Strings(files)
	for _, f := range files {
		var fx struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Value       json.RawMessage `json:"value"`
			Expect      struct {
				Allowed    bool `json:"allowed"`
				InputError *fxV `json:"input_error"`
				Violations []fxV
				Runnables  []struct{ Kind, Path, Pointer string }
				Tags       []struct{ Tag, Pointer string }
				Pins       []struct{ Path, Hash, Pointer string }
			} `json:"expect"`
		}
		readJSON(t, f, &fx)
		c := fxCase{Name: "flows/" + fx.Name, Description: fx.Description, RPC: "flow", Caller: "operator", Flow: fx.Value}
		switch {
		case fx.Expect.InputError != nil:
			c.Expect = fxExpect{Code: "INVALID_ARGUMENT", Violations: []fxV{{Reason: "", Doc: "flow", Pointer: fx.Expect.InputError.Pointer}}}
		case fx.Expect.Allowed:
			c.Expect = fxExpect{Code: "OK"}
			for _, r := range fx.Expect.Runnables {
				c.Expect.Refs = append(c.Expect.Refs, "runnable "+r.Kind+" "+r.Path+" "+r.Pointer)
			}
			for _, r := range fx.Expect.Tags {
				c.Expect.Refs = append(c.Expect.Refs, "tag "+r.Tag+" "+r.Pointer)
			}
			for _, r := range fx.Expect.Pins {
				c.Expect.Refs = append(c.Expect.Refs, "pin "+r.Path+" "+r.Hash+" "+r.Pointer)
			}
		default:
			c.Expect = fxExpect{Code: "PERMISSION_DENIED"}
			for _, v := range fx.Expect.Violations {
				c.Expect.Violations = append(c.Expect.Violations, fxV{Reason: v.Reason, Doc: "flow", Pointer: v.Pointer})
			}
		}
		out = append(out, c)
	}
	files, _ = filepath.Glob(filepath.Join(dir, "apps", "*.json"))
	sort.Strings(files)
	for _, f := range files {
		var fx struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Value       json.RawMessage `json:"value"`
			Policy      json.RawMessage `json:"policy"`
			Options     struct {
				Strip bool `json:"strip_sdk_read_scopes"`
			} `json:"options"`
			Expect struct {
				Allowed          bool `json:"allowed"`
				InputError       *fxV `json:"input_error"`
				Violations       []fxV
				PolicyPaths      []struct{ Kind, Path, Pointer string } `json:"policy_paths"`
				ValuePaths       []struct{ Kind, Path, Pointer string } `json:"value_paths"`
				ExecutionMode    string                                 `json:"execution_mode"`
				Kind             string                                 `json:"kind"`
				NormalizedPolicy json.RawMessage                        `json:"normalized_policy"`
			} `json:"expect"`
		}
		readJSON(t, f, &fx)
		ws := "bwk"
		if fx.Options.Strip {
			ws = "bw"
		}
		c := fxCase{Name: "apps/" + fx.Name, Description: fx.Description, RPC: "app", Caller: "operator", Workspace: ws,
			Value: fx.Value, Policy: fx.Policy, DeployPath: "MULTIPART"}
		switch {
		case fx.Expect.InputError != nil:
			doc := fx.Expect.InputError.Doc
			c.Expect = fxExpect{Code: "INVALID_ARGUMENT", Violations: []fxV{{Doc: doc, Pointer: fx.Expect.InputError.Pointer}}}
		case fx.Expect.Allowed:
			c.Expect = fxExpect{Code: "OK", NormalizedPolicy: fx.Expect.NormalizedPolicy}
			for _, r := range fx.Expect.PolicyPaths {
				c.Expect.Refs = append(c.Expect.Refs, "policy "+r.Kind+" "+r.Path+" "+r.Pointer)
			}
			for _, r := range fx.Expect.ValuePaths {
				c.Expect.Refs = append(c.Expect.Refs, "value "+r.Kind+" "+r.Path+" "+r.Pointer)
			}
			c.Expect.Refs = append(c.Expect.Refs, "mode "+fx.Expect.ExecutionMode)
		default:
			c.Expect = fxExpect{Code: "PERMISSION_DENIED", Violations: fx.Expect.Violations}
		}
		out = append(out, c)
	}
	var reqs []requestFixture
	for _, n := range []string{"preview", "deploy"} {
		var rf requestFixture
		readJSON(t, filepath.Join(dir, "requests", n+".json"), &rf)
		reqs = append(reqs, rf)
	}
	for _, rf := range reqs {
		for _, rc := range rf.Cases {
			caller := "dev"
			if rc.IsOperator {
				caller = "operator"
			}
			c := fxCase{Name: "requests/" + rf.Name + "/" + rc.Name, Caller: caller, Expect: fxExpect{Code: "OK"}}
			if !rc.Expect.Allowed {
				c.Expect.Code = "PERMISSION_DENIED"
				for _, v := range rc.Expect.Violations {
					c.Expect.Violations = append(c.Expect.Violations, fxV{Reason: v.Reason, Doc: "request"})
				}
			}
			if rf.Name == "preview" {
				c.RPC = "preview"
				if rc.RawCode {
					code := "raw"
					c.RawCode = &code
					if rc.Path != "" {
						// The request carries code; the path beside it is what the fixture checks
						// for hub: the service takes one target, so code wins and the hub finding
						// would be dropped. Run the path on its own instead.
						p := rc.Path
						c.RawCode, c.Path = nil, &p
						c.Expect.Violations = filterReason(c.Expect.Violations, "INLINE_CODE")
						if len(c.Expect.Violations) == 0 {
							c.Expect.Code = "OK"
						}
					}
				} else {
					p := rc.Path
					c.Path = &p
				}
			} else {
				dp := map[string]string{"multipart": "MULTIPART", "source": "SOURCE"}[rc.DeployPath]
				if dp == "" {
					// The enum cannot carry an unknown path: DEPLOY_PATH_UNSPECIFIED is
					// InvalidArgument (builder_test.go), which refuses all the same.
					continue
				}
				c.RPC, c.DeployPath, c.CallerScopes = "app", dp, rc.Scopes
				c.Value, c.Policy = json.RawMessage(`{"type":"rawapp","files":{}}`), json.RawMessage(`{}`)
			}
			out = append(out, c)
		}
	}
	return out
}

type requestFixture struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Cases       []struct {
		Name        string   `json:"name"`
		Description string   `json:"description"`
		Path        string   `json:"path"`
		RawCode     bool     `json:"raw_code"`
		IsOperator  bool     `json:"is_operator"`
		DeployPath  string   `json:"deploy_path"`
		Scopes      []string `json:"scopes"`
		Expect      struct {
			Allowed    bool  `json:"allowed"`
			Violations []fxV `json:"violations"`
		} `json:"expect"`
	} `json:"cases"`
}

func filterReason(vs []fxV, drop string) []fxV {
	var out []fxV
	for _, v := range vs {
		if v.Reason != drop {
			out = append(out, v)
		}
	}
	return out
}

// outcome is a transport-independent answer.
type outcome struct {
	Code             string
	Violations       []fxV
	CodeFindings     []fxV
	Refs             []string
	NormalizedPolicy string
}

func violationsOf(err error) []fxV {
	out := []fxV{}
	for _, info := range errs.Infos(err) {
		md := info.GetMetadata()
		out = append(out, fxV{Reason: strings.TrimPrefix(info.GetReason(), "ERROR_REASON_"), Doc: md["doc"], Pointer: md["pointer"]})
	}
	return out
}

func findingsOf(fs []*policyv1.BuilderFinding) []fxV {
	out := []fxV{}
	for _, f := range fs {
		out = append(out, fxV{Reason: strings.TrimPrefix(f.GetReason(), "ERROR_REASON_"), Doc: f.GetDoc(), Pointer: f.GetPointer()})
	}
	return out
}

func kindName(k policyv1.RunnableKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "RUNNABLE_KIND_"))
}

func flowRefs(r *policyv1.CheckFlowResponse) []string {
	var out []string
	for _, x := range r.GetRunnables() {
		out = append(out, "runnable "+kindName(x.GetKind())+" "+x.GetPath()+" "+x.GetPointer())
	}
	for _, x := range r.GetTags() {
		out = append(out, "tag "+x.GetTag()+" "+x.GetPointer())
	}
	for _, x := range r.GetPins() {
		out = append(out, "pin "+x.GetPath()+" "+x.GetHash()+" "+x.GetPointer())
	}
	return out
}

func appRefs(r *policyv1.CheckAppResponse) []string {
	var out []string
	for _, x := range r.GetPolicyPaths() {
		out = append(out, "policy "+kindName(x.GetKind())+" "+x.GetPath()+" "+x.GetPointer())
	}
	for _, x := range r.GetValuePaths() {
		out = append(out, "value "+kindName(x.GetKind())+" "+x.GetPath()+" "+x.GetPointer())
	}
	return append(out, "mode "+r.GetExecutionMode())
}

func flowText(c fxCase) string {
	if c.FlowText != nil {
		return *c.FlowText
	}
	return string(c.Flow)
}

// codeName is the canonical upper-case name of a gRPC code (the REST runner reads the same
// names off the HTTP answer).
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	}
	return c.String()
}

// checkOutcome compares an answer with the case, the same way the REST runner does.
func checkOutcome(t *testing.T, c fxCase, o outcome) {
	t.Helper()
	require.Equal(t, c.Expect.Code, o.Code, "violations: %v", o.Violations)
	switch c.Expect.Code {
	case "OK":
		assert.Empty(t, o.Violations)
		assert.Equal(t, orNone(c.Expect.CodeFindings), orNone(o.CodeFindings), "code_findings")
		if c.Expect.Refs != nil {
			assert.Equal(t, c.Expect.Refs, o.Refs, "references")
		}
		if len(c.Expect.NormalizedPolicy) > 0 {
			assert.JSONEq(t, string(c.Expect.NormalizedPolicy), o.NormalizedPolicy, "normalized policy")
		}
		if c.RPC == "app" && c.Caller == "operator" {
			var p map[string]any
			require.NoError(t, json.Unmarshal([]byte(o.NormalizedPolicy), &p))
			assert.Equal(t, true, p["sandbox"], "an operator's app is always sandboxed")
		}
	case "INVALID_ARGUMENT":
		require.Len(t, o.Violations, 1)
		want := c.Expect.Violations[0]
		if want.Reason != "" {
			assert.Equal(t, want.Reason, o.Violations[0].Reason)
		} else {
			assert.Contains(t, []string{"INVALID_FIELD", "VALUE_TOO_LARGE"}, o.Violations[0].Reason)
		}
		if want.Doc != "" {
			assert.Equal(t, want.Doc, o.Violations[0].Doc)
		}
		assert.Equal(t, want.Pointer, o.Violations[0].Pointer)
	default:
		assert.Equal(t, orNone(c.Expect.Violations), o.Violations, "violations")
	}
}

func readers(ps []string) []*policyv1.ExtraPerm {
	var out []*policyv1.ExtraPerm
	for _, p := range ps {
		out = append(out, &policyv1.ExtraPerm{Principal: p})
	}
	return out
}

func loadBuilderFixtures(t testing.TB) (serviceFixture, []fxCase) {
	t.Helper()
	var sf serviceFixture
	readJSON(t, filepath.Join(fixtureDir, "service", "service.json"), &sf)
	cases := append(walkCases(t, fixtureDir), sf.Cases...)
	return sf, cases
}

// builderClient drives one stack: gRPC straight to policy, REST through the gateway, both with
// the superadmin token acting for the case's caller (on_behalf_of).
type builderClient struct {
	conn  *grpc.ClientConn
	ctx   context.Context
	http  string
	token string
}

func (b *builderClient) setup(t *testing.T, s fxSetup) {
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
				LatestHash: sc.Hashes[0], VersionHashes: sc.Hashes, ExtraPerms: readers(sc.Readers)})
			require.NoError(t, err, sc.Path)
		}
		for _, f := range s.Flows {
			_, err := cat.RegisterFlow(b.ctx, &policyv1.RegisterFlowRequest{Workspace: w.Name, Path: f.Path, ExtraPerms: readers(f.Readers)})
			require.NoError(t, err, f.Path)
		}
	}
}

// request builds the case's request message and the REST route it is posted to.
func (b *builderClient) request(c fxCase) (proto.Message, string) {
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
		return &policyv1.CheckFlowRequest{Workspace: ws, OnBehalfOf: c.Caller, Action: action, FlowJson: flowText(c)}, base + "flows:check"
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

func outcomeOf(resp proto.Message) outcome {
	var o outcome
	switch r := resp.(type) {
	case *policyv1.CheckFlowResponse:
		o.Refs, o.CodeFindings = flowRefs(r), findingsOf(r.GetCodeFindings())
	case *policyv1.CheckAppResponse:
		o.Refs, o.CodeFindings, o.NormalizedPolicy = appRefs(r), findingsOf(r.GetCodeFindings()), r.GetNormalizedPolicyJson()
	}
	return o
}

func (b *builderClient) grpc(t *testing.T, c fxCase) outcome {
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
	o := outcome{}
	if err == nil {
		o = outcomeOf(resp)
	}
	o.Code, o.Violations = codeName(status.Code(err)), violationsOf(err)
	return o
}

// rest posts the request as REST clients do: protojson with the documents as JSON strings.
func (b *builderClient) rest(t *testing.T, c fxCase) outcome {
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
		o.Code, o.Violations = "OK", []fxV{}
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
	o := outcome{Code: codeName(codes.Code(st.Code)), Violations: []fxV{}}
	for _, d := range st.Details {
		if d.Type != "type.googleapis.com/google.rpc.ErrorInfo" || d.Domain != errs.Domain {
			continue
		}
		o.Violations = append(o.Violations, fxV{Reason: strings.TrimPrefix(d.Reason, "ERROR_REASON_"), Doc: d.Metadata["doc"], Pointer: d.Metadata["pointer"]})
	}
	return o
}

func TestBuilderFixturesREST(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack; skipped with -short")
	}
	sf, cases := loadBuilderFixtures(t)
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
			checkOutcome(t, c, r)
			g := b.grpc(t, c)
			g.CodeFindings, r.CodeFindings = orNone(g.CodeFindings), orNone(r.CodeFindings)
			assert.Equal(t, g, r, "REST and gRPC must reach the same decision")
		})
	}
}
