package builderfixture

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// Setup is the service fixture's world, applied to every workspace it lists: members, the
// workspace's builder settings, worker tags, scripts with their version hashes and flows, each
// with the principals that may read it.
type Setup struct {
	Members    []SetupMember    `json:"members"`
	Workspaces []SetupWorkspace `json:"workspaces"`
	Scripts    []SetupScript    `json:"scripts"`
	Flows      []SetupFlow      `json:"flows"`
	Tags       []SetupTag       `json:"tags"`
}

// SetupMember is a workspace member and its role (admin, developer, operator).
type SetupMember struct {
	Username string `json:"username"`
	Role     string `json:"role"`
}

// SetupWorkspace is a workspace and its operator settings.
type SetupWorkspace struct {
	Name    string `json:"name"`
	Builder bool   `json:"builder"`
	Strip   bool   `json:"strip_builder_sdk_read_scopes"`
}

// SetupScript is a script in the catalog; Hashes[0] is its latest version.
type SetupScript struct {
	Path    string   `json:"path"`
	Hashes  []string `json:"hashes"`
	Readers []string `json:"readers"`
}

// SetupFlow is a flow in the catalog.
type SetupFlow struct {
	Path    string   `json:"path"`
	Readers []string `json:"readers"`
}

// SetupTag is a worker tag rule.
type SetupTag struct {
	Name       string `json:"name"`
	Privileged bool   `json:"privileged"`
}

// Case is one call to BuilderService: a service case, or a walk fixture turned into one.
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
	Violations       []Violation     `json:"violations"`
	CodeFindings     []Violation     `json:"code_findings"`
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

// Load reads the service fixture under dir (the builder testdata directory) and returns it with
// every case to replay: the walk fixtures' cases, then the service fixture's own.
func Load(t testing.TB, dir string) (ServiceFixture, []Case) {
	t.Helper()
	var sf ServiceFixture
	ReadJSON(t, filepath.Join(dir, "service", "service.json"), &sf)
	return sf, append(WalkCases(t, dir), sf.Cases...)
}

// WalkCases turns every walk fixture into the call an operator with builder rights makes, for
// whom (by the service setup) every referenced path, pin and tag is readable/available: the
// service's decision must then be exactly the value-only one.
func WalkCases(t testing.TB, dir string) []Case {
	t.Helper()
	var out []Case
	for _, fx := range Flows(t, dir) {
		out = append(out, flowCase(fx))
	}
	for _, fx := range Apps(t, dir) {
		out = append(out, appCase(fx))
	}
	for _, rf := range Requests(t, dir) {
		for _, rc := range rf.Cases {
			if c, ok := requestCase(rf.Name, rc); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

func flowCase(fx FlowFixture) Case {
	c := Case{Name: "flows/" + fx.Name, Description: fx.Description, RPC: "flow", Caller: "operator", Flow: fx.Value}
	switch {
	case fx.Expect.InputError != nil:
		c.Expect = Expect{Code: "INVALID_ARGUMENT", Violations: []Violation{{Doc: "flow", Pointer: fx.Expect.InputError.Pointer}}}
	case fx.Expect.Allowed:
		c.Expect = Expect{Code: "OK", Refs: FlowRefStrings(fx.Expect.Runnables, fx.Expect.Tags, fx.Expect.Pins)}
	default:
		c.Expect = Expect{Code: "PERMISSION_DENIED"}
		for _, v := range fx.Expect.Violations {
			c.Expect.Violations = append(c.Expect.Violations, Violation{Reason: v.Reason, Doc: "flow", Pointer: v.Pointer})
		}
	}
	return c
}

func appCase(fx AppFixture) Case {
	ws := "bwk"
	if fx.Options.StripSDKReadScopes {
		ws = "bw"
	}
	c := Case{Name: "apps/" + fx.Name, Description: fx.Description, RPC: "app", Caller: "operator", Workspace: ws,
		Value: fx.Value, Policy: fx.Policy, DeployPath: "MULTIPART"}
	switch {
	case fx.Expect.InputError != nil:
		c.Expect = Expect{Code: "INVALID_ARGUMENT", Violations: []Violation{{Doc: fx.Expect.InputError.Doc, Pointer: fx.Expect.InputError.Pointer}}}
	case fx.Expect.Allowed:
		c.Expect = Expect{Code: "OK", NormalizedPolicy: fx.Expect.NormalizedPolicy,
			Refs: AppRefStrings(fx.Expect.PolicyPaths, fx.Expect.ValuePaths, fx.Expect.ExecutionMode)}
	default:
		c.Expect = Expect{Code: "PERMISSION_DENIED", Violations: fx.Expect.Violations}
	}
	return c
}

// requestCase turns a preview or deploy request case into a service call; ok is false for a
// case the service's request cannot express.
func requestCase(fixture string, rc RequestCase) (Case, bool) {
	caller := "dev"
	if rc.IsOperator {
		caller = "operator"
	}
	c := Case{Name: "requests/" + fixture + "/" + rc.Name, Caller: caller, Expect: Expect{Code: "OK"}}
	if !rc.Expect.Allowed {
		c.Expect.Code = "PERMISSION_DENIED"
		for _, v := range rc.Expect.Violations {
			c.Expect.Violations = append(c.Expect.Violations, Violation{Reason: v.Reason, Doc: "request"})
		}
	}
	if fixture == "preview" {
		c.RPC = "preview"
		p := rc.Path
		switch {
		case !rc.RawCode:
			c.Path = &p
		case rc.Path != "":
			// The request carries code; the path beside it is what the fixture checks for hub:
			// the service takes one target, so code wins and the hub finding would be dropped.
			// Run the path on its own instead.
			c.Path = &p
			c.Expect.Violations = withoutReason(c.Expect.Violations, "INLINE_CODE")
			if len(c.Expect.Violations) == 0 {
				c.Expect.Code = "OK"
			}
		default:
			code := "raw"
			c.RawCode = &code
		}
		return c, true
	}
	dp := map[string]string{"multipart": "MULTIPART", "source": "SOURCE"}[rc.DeployPath]
	if dp == "" {
		// The enum cannot carry an unknown path: DEPLOY_PATH_UNSPECIFIED is InvalidArgument
		// (services/policy/internal/api/builder_test.go), which refuses all the same.
		return Case{}, false
	}
	c.RPC, c.DeployPath, c.CallerScopes = "app", dp, rc.Scopes
	c.Value, c.Policy = json.RawMessage(`{"type":"rawapp","files":{}}`), json.RawMessage(`{}`)
	return c, true
}

func withoutReason(vs []Violation, drop string) []Violation {
	var out []Violation
	for _, v := range vs {
		if v.Reason != drop {
			out = append(out, v)
		}
	}
	return out
}

// FlowRefStrings lists a flow's references in the one-line form answers are compared in.
func FlowRefStrings(runnables []Runnable, tags []Tag, pins []Pin) []string {
	var out []string
	for _, r := range runnables {
		out = append(out, "runnable "+r.Kind+" "+r.Path+" "+r.Pointer)
	}
	for _, r := range tags {
		out = append(out, "tag "+r.Tag+" "+r.Pointer)
	}
	for _, r := range pins {
		out = append(out, "pin "+r.Path+" "+r.Hash+" "+r.Pointer)
	}
	return out
}

// AppRefStrings lists an app's references and execution mode in the one-line form answers are
// compared in.
func AppRefStrings(policyPaths, valuePaths []Runnable, mode string) []string {
	var out []string
	for _, r := range policyPaths {
		out = append(out, "policy "+r.Kind+" "+r.Path+" "+r.Pointer)
	}
	for _, r := range valuePaths {
		out = append(out, "value "+r.Kind+" "+r.Path+" "+r.Pointer)
	}
	return append(out, "mode "+mode)
}
