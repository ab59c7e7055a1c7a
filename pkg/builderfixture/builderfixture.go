package builderfixture

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/errs"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// V is a violation or code finding: reason (without ERROR_REASON_), document and pointer.
type V struct {
	Reason  string `json:"reason"`
	Doc     string `json:"doc"`
	Pointer string `json:"pointer"`
}

// Setup is the service fixture's world: members, workspaces, scripts, flows and worker tags.
type Setup struct {
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
		Readers []string `json:"Readers"`
	} `json:"scripts"`
	Flows []struct {
		Path    string   `json:"path"`
		Readers []string `json:"Readers"`
	} `json:"flows"`
	Tags []struct {
		Name       string `json:"name"`
		Privileged bool   `json:"privileged"`
	} `json:"tags"`
}

// Case is one call: a service case, or a walk fixture turned into one.
type Case struct {
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
	Expect       Expect          `json:"expect"`
}

// Expect is a case's expected answer.
type Expect struct {
	Code             string          `json:"code"`
	Violations       []V             `json:"violations"`
	CodeFindings     []V             `json:"code_findings"`
	NormalizedPolicy json.RawMessage `json:"normalized_policy"`
	// Filled from walk fixtures: the references an allowed answer returns.
	Refs []string `json:"-"`
}

// ServiceFixture is service/service.json: the setup and the service cases.
type ServiceFixture struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Setup       Setup  `json:"setup"`
	Cases       []Case `json:"cases"`
}

// ReadJSON decodes file into into, refusing unknown fields.
func ReadJSON(t testing.TB, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(into), file)
}

// OrNone returns s, or an empty slice for nil.
func OrNone[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// WalkCases turns every walk fixture into the call an operator with builder rights makes, for
// whom (by the service setup) every referenced path, pin and tag is readable/available: the
// service's decision must then be exactly the value-only one.
func WalkCases(t testing.TB, dir string) []Case {
	t.Helper()
	var out []Case
	files, _ := filepath.Glob(filepath.Join(dir, "flows", "*.json"))
	sort.Strings(files)
	for _, f := range files {
		var fx struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Value       json.RawMessage `json:"value"`
			Expect      struct {
				Allowed    bool `json:"allowed"`
				InputError *V   `json:"input_error"`
				Violations []V
				Runnables  []struct{ Kind, Path, Pointer string }
				Tags       []struct{ Tag, Pointer string }
				Pins       []struct{ Path, Hash, Pointer string }
			} `json:"expect"`
		}
		ReadJSON(t, f, &fx)
		c := Case{Name: "flows/" + fx.Name, Description: fx.Description, RPC: "flow", Caller: "operator", Flow: fx.Value}
		switch {
		case fx.Expect.InputError != nil:
			c.Expect = Expect{Code: "INVALID_ARGUMENT", Violations: []V{{Reason: "", Doc: "flow", Pointer: fx.Expect.InputError.Pointer}}}
		case fx.Expect.Allowed:
			c.Expect = Expect{Code: "OK"}
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
			c.Expect = Expect{Code: "PERMISSION_DENIED"}
			for _, v := range fx.Expect.Violations {
				c.Expect.Violations = append(c.Expect.Violations, V{Reason: v.Reason, Doc: "flow", Pointer: v.Pointer})
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
				InputError       *V   `json:"input_error"`
				Violations       []V
				PolicyPaths      []struct{ Kind, Path, Pointer string } `json:"policy_paths"`
				ValuePaths       []struct{ Kind, Path, Pointer string } `json:"value_paths"`
				ExecutionMode    string                                 `json:"execution_mode"`
				Kind             string                                 `json:"kind"`
				NormalizedPolicy json.RawMessage                        `json:"normalized_policy"`
			} `json:"expect"`
		}
		ReadJSON(t, f, &fx)
		ws := "bwk"
		if fx.Options.Strip {
			ws = "bw"
		}
		c := Case{Name: "apps/" + fx.Name, Description: fx.Description, RPC: "app", Caller: "operator", Workspace: ws,
			Value: fx.Value, Policy: fx.Policy, DeployPath: "MULTIPART"}
		switch {
		case fx.Expect.InputError != nil:
			doc := fx.Expect.InputError.Doc
			c.Expect = Expect{Code: "INVALID_ARGUMENT", Violations: []V{{Doc: doc, Pointer: fx.Expect.InputError.Pointer}}}
		case fx.Expect.Allowed:
			c.Expect = Expect{Code: "OK", NormalizedPolicy: fx.Expect.NormalizedPolicy}
			for _, r := range fx.Expect.PolicyPaths {
				c.Expect.Refs = append(c.Expect.Refs, "policy "+r.Kind+" "+r.Path+" "+r.Pointer)
			}
			for _, r := range fx.Expect.ValuePaths {
				c.Expect.Refs = append(c.Expect.Refs, "value "+r.Kind+" "+r.Path+" "+r.Pointer)
			}
			c.Expect.Refs = append(c.Expect.Refs, "mode "+fx.Expect.ExecutionMode)
		default:
			c.Expect = Expect{Code: "PERMISSION_DENIED", Violations: fx.Expect.Violations}
		}
		out = append(out, c)
	}
	var reqs []requestFixture
	for _, n := range []string{"preview", "deploy"} {
		var rf requestFixture
		ReadJSON(t, filepath.Join(dir, "requests", n+".json"), &rf)
		reqs = append(reqs, rf)
	}
	for _, rf := range reqs {
		for _, rc := range rf.Cases {
			caller := "dev"
			if rc.IsOperator {
				caller = "operator"
			}
			c := Case{Name: "requests/" + rf.Name + "/" + rc.Name, Caller: caller, Expect: Expect{Code: "OK"}}
			if !rc.Expect.Allowed {
				c.Expect.Code = "PERMISSION_DENIED"
				for _, v := range rc.Expect.Violations {
					c.Expect.Violations = append(c.Expect.Violations, V{Reason: v.Reason, Doc: "request"})
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
			Allowed    bool `json:"allowed"`
			Violations []V  `json:"violations"`
		} `json:"expect"`
	} `json:"cases"`
}

func filterReason(vs []V, drop string) []V {
	var out []V
	for _, v := range vs {
		if v.Reason != drop {
			out = append(out, v)
		}
	}
	return out
}

// Outcome is a transport-independent answer.
type Outcome struct {
	Code             string
	Violations       []V
	CodeFindings     []V
	Refs             []string
	NormalizedPolicy string
}

// ViolationsOf returns the ErrorInfo violations carried by a gRPC error (empty for nil).
func ViolationsOf(err error) []V {
	out := []V{}
	for _, info := range errs.Infos(err) {
		md := info.GetMetadata()
		out = append(out, V{Reason: strings.TrimPrefix(info.GetReason(), "ERROR_REASON_"), Doc: md["doc"], Pointer: md["pointer"]})
	}
	return out
}

// FindingsOf converts an answer's code findings.
func FindingsOf(fs []*policyv1.BuilderFinding) []V {
	out := []V{}
	for _, f := range fs {
		out = append(out, V{Reason: strings.TrimPrefix(f.GetReason(), "ERROR_REASON_"), Doc: f.GetDoc(), Pointer: f.GetPointer()})
	}
	return out
}

func kindName(k policyv1.RunnableKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "RUNNABLE_KIND_"))
}

// FlowRefs lists a CheckFlow answer's references in the fixtures' form.
func FlowRefs(r *policyv1.CheckFlowResponse) []string {
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

// AppRefs lists a CheckApp answer's references and execution mode in the fixtures' form.
func AppRefs(r *policyv1.CheckAppResponse) []string {
	var out []string
	for _, x := range r.GetPolicyPaths() {
		out = append(out, "policy "+kindName(x.GetKind())+" "+x.GetPath()+" "+x.GetPointer())
	}
	for _, x := range r.GetValuePaths() {
		out = append(out, "value "+kindName(x.GetKind())+" "+x.GetPath()+" "+x.GetPointer())
	}
	return append(out, "mode "+r.GetExecutionMode())
}

// FlowText is the flow document the case sends.
func FlowText(c Case) string {
	if c.FlowText != nil {
		return *c.FlowText
	}
	return string(c.Flow)
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
	}
	return c.String()
}

// Check compares an answer with the case, the same way the REST runner does.
func Check(t *testing.T, c Case, o Outcome) {
	t.Helper()
	require.Equal(t, c.Expect.Code, o.Code, "violations: %v", o.Violations)
	switch c.Expect.Code {
	case "OK":
		assert.Empty(t, o.Violations)
		assert.Equal(t, OrNone(c.Expect.CodeFindings), OrNone(o.CodeFindings), "code_findings")
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
		assert.Equal(t, OrNone(c.Expect.Violations), o.Violations, "violations")
	}
}

// Readers turns principals into extra read permissions.
func Readers(ps []string) []*policyv1.ExtraPerm {
	var out []*policyv1.ExtraPerm
	for _, p := range ps {
		out = append(out, &policyv1.ExtraPerm{Principal: p})
	}
	return out
}

// Load reads the service fixture under dir (the builder testdata directory) and returns it with
// every case to replay: the walk fixtures' cases, then the service fixture's own.
func Load(t testing.TB, dir string) (ServiceFixture, []Case) {
	t.Helper()
	var sf ServiceFixture
	ReadJSON(t, filepath.Join(dir, "service", "service.json"), &sf)
	cases := append(WalkCases(t, dir), sf.Cases...)
	return sf, cases
}
