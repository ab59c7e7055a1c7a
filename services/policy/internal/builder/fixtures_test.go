package builder

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fixture format is documented in testdata/README.md; other runners replay the same files
// over gRPC and REST, so this runner checks exactly what the README promises and nothing more.

type fixtureViolation struct {
	Reason  string `json:"reason"`
	Doc     string `json:"doc,omitempty"`
	Pointer string `json:"pointer"`
}

type fixtureRunnable struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Pointer string `json:"pointer"`
}

type fixtureTag struct {
	Tag     string `json:"tag"`
	Pointer string `json:"pointer"`
}

type fixturePin struct {
	Path    string `json:"path"`
	Hash    string `json:"hash"`
	Pointer string `json:"pointer"`
}

type fixtureInputError struct {
	Doc     string `json:"doc,omitempty"`
	Pointer string `json:"pointer"`
}

type flowFixture struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Value       json.RawMessage `json:"value"`
	Expect      struct {
		Allowed    bool               `json:"allowed"`
		InputError *fixtureInputError `json:"input_error"`
		Violations []fixtureViolation `json:"violations"`
		Runnables  []fixtureRunnable  `json:"runnables"`
		Tags       []fixtureTag       `json:"tags"`
		Pins       []fixturePin       `json:"pins"`
	} `json:"expect"`
}

type appFixture struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Value       json.RawMessage `json:"value"`
	Policy      json.RawMessage `json:"policy"`
	Options     struct {
		StripSDKReadScopes bool `json:"strip_sdk_read_scopes"`
	} `json:"options"`
	Expect struct {
		Allowed          bool               `json:"allowed"`
		InputError       *fixtureInputError `json:"input_error"`
		Violations       []fixtureViolation `json:"violations"`
		PolicyPaths      []fixtureRunnable  `json:"policy_paths"`
		ValuePaths       []fixtureRunnable  `json:"value_paths"`
		ExecutionMode    string             `json:"execution_mode"`
		Kind             string             `json:"kind"`
		NormalizedPolicy json.RawMessage    `json:"normalized_policy"`
	} `json:"expect"`
}

func loadFixtures(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no fixtures in testdata/%s", dir)
	sort.Strings(files)
	return files
}

func readFixture(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields() // a typo in a fixture must not silently weaken it
	require.NoError(t, dec.Decode(into), file)
}

func TestFlowFixtures(t *testing.T) {
	for _, file := range loadFixtures(t, "flows") {
		var fx flowFixture
		readFixture(t, file, &fx)
		t.Run(fx.Name, func(t *testing.T) {
			require.Equal(t, strings.TrimSuffix(filepath.Base(file), ".json"), fx.Name, "file name and fixture name differ")
			require.NotEmpty(t, fx.Description)
			rep, err := WalkFlow(fx.Value, Limits{})
			if fx.Expect.InputError != nil {
				var ie *InputError
				require.ErrorAs(t, err, &ie)
				assert.Equal(t, fx.Expect.InputError.Pointer, ie.Pointer, ie.Error())
				assert.False(t, fx.Expect.Allowed, "an input error is never allowed")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, fx.Expect.Allowed, rep.Composable(), "allowed")
			assert.Equal(t, fx.Expect.Allowed, len(fx.Expect.Violations) == 0, "fixture: allowed must mean no violations")

			got := []fixtureViolation{}
			for _, v := range rep.Violations {
				assert.Equal(t, DocFlow, v.Doc)
				assert.NotEmpty(t, v.Message)
				got = append(got, fixtureViolation{Reason: string(v.Reason), Pointer: v.Pointer.String()})
			}
			assert.Equal(t, orEmpty(fx.Expect.Violations), got, "violations")
			assert.Equal(t, orEmpty(fx.Expect.Runnables), runnablesOf(rep.Runnables), "runnables")
			tags := []fixtureTag{}
			for _, tg := range rep.Tags {
				tags = append(tags, fixtureTag{Tag: tg.Tag, Pointer: tg.Pointer.String()})
			}
			assert.Equal(t, orEmpty(fx.Expect.Tags), tags, "tags")
			pins := []fixturePin{}
			for _, p := range rep.Pins {
				pins = append(pins, fixturePin{Path: p.Path, Hash: p.Hash, Pointer: p.Pointer.String()})
			}
			assert.Equal(t, orEmpty(fx.Expect.Pins), pins, "pins")
			assertPointersResolve(t, fx.Value, flowPointers(rep))
		})
	}
}

func TestAppFixtures(t *testing.T) {
	for _, file := range loadFixtures(t, "apps") {
		var fx appFixture
		readFixture(t, file, &fx)
		t.Run(fx.Name, func(t *testing.T) {
			require.Equal(t, strings.TrimSuffix(filepath.Base(file), ".json"), fx.Name, "file name and fixture name differ")
			require.NotEmpty(t, fx.Description)
			rep, err := WalkApp(fx.Value, fx.Policy, Limits{}, AppOptions{StripSDKReadScopes: fx.Options.StripSDKReadScopes})
			if fx.Expect.InputError != nil {
				var ie *InputError
				require.ErrorAs(t, err, &ie)
				assert.Equal(t, fx.Expect.InputError.Pointer, ie.Pointer, ie.Error())
				if fx.Expect.InputError.Doc != "" {
					assert.Equal(t, Doc(fx.Expect.InputError.Doc), ie.Doc)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, fx.Expect.Allowed, rep.Composable(), "allowed")
			assert.Equal(t, fx.Expect.Allowed, len(fx.Expect.Violations) == 0, "fixture: allowed must mean no violations")

			got := []fixtureViolation{}
			var valuePtrs, policyPtrs []string
			for _, v := range rep.Violations {
				assert.NotEmpty(t, v.Message)
				got = append(got, fixtureViolation{Reason: string(v.Reason), Doc: string(v.Doc), Pointer: v.Pointer.String()})
				switch v.Doc {
				case DocAppValue:
					valuePtrs = append(valuePtrs, v.Pointer.String())
				case DocAppPolicy:
					policyPtrs = append(policyPtrs, v.Pointer.String())
				default:
					t.Errorf("app violation with doc %q", v.Doc)
				}
			}
			assert.Equal(t, orEmpty(fx.Expect.Violations), got, "violations")
			assert.Equal(t, orEmpty(fx.Expect.PolicyPaths), runnablesOf(rep.PolicyPaths), "policy_paths")
			assert.Equal(t, orEmpty(fx.Expect.ValuePaths), runnablesOf(rep.ValuePaths), "value_paths")
			assert.Equal(t, fx.Expect.ExecutionMode, rep.ExecutionMode, "execution_mode")
			if fx.Expect.Kind != "" {
				assert.Equal(t, AppKind(fx.Expect.Kind), rep.Kind, "kind")
			}
			for _, r := range rep.ValuePaths {
				valuePtrs = append(valuePtrs, r.Pointer.String())
			}
			for _, r := range rep.PolicyPaths {
				policyPtrs = append(policyPtrs, r.Pointer.String())
			}
			assertPointersResolve(t, fx.Value, valuePtrs)
			assertPointersResolve(t, fx.Policy, policyPtrs)
			assertNormalizedPolicy(t, fx.Policy, rep.NormalizedPolicy, fx.Options.StripSDKReadScopes)
			if len(fx.Expect.NormalizedPolicy) > 0 {
				assert.JSONEq(t, string(fx.Expect.NormalizedPolicy), string(rep.NormalizedPolicy), "normalized_policy")
			}
		})
	}
}

type requestCase struct {
	Name       string   `json:"name"`
	Path       string   `json:"path"`
	RawCode    bool     `json:"raw_code"`
	IsOperator bool     `json:"is_operator"`
	DeployPath string   `json:"deploy_path"`
	Scopes     []string `json:"scopes"`
	Expect     struct {
		Allowed    bool `json:"allowed"`
		Violations []struct {
			Reason string `json:"reason"`
		} `json:"violations"`
	} `json:"expect"`
}

type requestFixture struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Cases       []requestCase `json:"cases"`
}

func TestRequestFixtures(t *testing.T) {
	for _, file := range loadFixtures(t, "requests") {
		var fx requestFixture
		readFixture(t, file, &fx)
		for _, c := range fx.Cases {
			t.Run(fx.Name+"/"+c.Name, func(t *testing.T) {
				var vs []Violation
				switch fx.Name {
				case "preview":
					vs = CheckPreview(c.Path, c.RawCode, c.IsOperator)
				case "deploy":
					vs = CheckDeployPath(DeployPath(c.DeployPath), c.IsOperator, c.Scopes)
				default:
					t.Fatalf("unknown request fixture %q", fx.Name)
				}
				got := []string{}
				for _, v := range vs {
					assert.Equal(t, DocRequest, v.Doc)
					assert.Empty(t, v.Pointer.String())
					assert.NotEmpty(t, v.Message)
					got = append(got, string(v.Reason))
				}
				want := []string{}
				for _, v := range c.Expect.Violations {
					want = append(want, v.Reason)
				}
				assert.Equal(t, want, got)
				assert.Equal(t, c.Expect.Allowed, len(vs) == 0)
			})
		}
	}
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func runnablesOf(refs []RunnableRef) []fixtureRunnable {
	out := []fixtureRunnable{}
	for _, r := range refs {
		out = append(out, fixtureRunnable{Kind: string(r.Kind), Path: r.Path, Pointer: r.Pointer.String()})
	}
	return out
}

func flowPointers(rep FlowReport) []string {
	var ps []string
	for _, v := range rep.Violations {
		ps = append(ps, v.Pointer.String())
	}
	for _, r := range rep.Runnables {
		ps = append(ps, r.Pointer.String())
	}
	for _, r := range rep.Tags {
		ps = append(ps, r.Pointer.String())
	}
	for _, r := range rep.Pins {
		ps = append(ps, r.Pointer.String())
	}
	return ps
}

// assertPointersResolve checks every pointer against the document as encoding/json reads it,
// an independent reader, so a pointer bug cannot hide behind the package's own tree.
func assertPointersResolve(t *testing.T, raw []byte, ptrs []string) {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal(raw, &doc))
	for _, p := range ptrs {
		_, ok := resolvePointer(doc, p)
		assert.True(t, ok, "pointer %q does not resolve", p)
	}
}

// resolvePointer is an RFC 6901 resolver, written independently of escapePointerToken.
func resolvePointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != tok {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// assertNormalizedPolicy: valid JSON, sandbox true, execution_mode pinned (the input's, or
// publisher where it was omitted or null), every other member equal to the input's except the
// stripped scopes.
func assertNormalizedPolicy(t *testing.T, policy, normalized []byte, strip bool) {
	t.Helper()
	var in, out map[string]any
	if s := strings.TrimSpace(string(policy)); s == "" || s == "null" {
		policy = []byte("{}")
	}
	require.NoError(t, json.Unmarshal(policy, &in))
	require.NoError(t, json.Unmarshal(normalized, &out), string(normalized))
	assert.Equal(t, true, out["sandbox"], "sandbox forced")
	mode, _ := in["execution_mode"].(string)
	if mode == "" {
		mode = "publisher"
	}
	assert.Equal(t, mode, out["execution_mode"], "execution_mode pinned")
	for k, v := range in {
		if k == "sandbox" || k == "execution_mode" || (strip && k == "frontend_sdk_scopes") {
			continue
		}
		assert.Equal(t, v, out[k], "policy field %q must be preserved", k)
	}
	for k := range out {
		if k == "sandbox" || k == "execution_mode" {
			continue
		}
		_, ok := in[k]
		assert.True(t, ok, "normalized policy grew field %q", k)
	}
	if strip {
		if scopes, ok := out["frontend_sdk_scopes"].([]any); ok {
			for _, s := range scopes {
				assert.False(t, isSDKReadScope(s.(string)), "scope %v must be stripped", s)
			}
		}
	}
}
