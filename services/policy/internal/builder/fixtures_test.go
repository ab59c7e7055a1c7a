package builder

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bf "github.com/millwright/millwright/pkg/builderfixture"
)

// The fixture format is documented in testdata/README.md; other runners replay the same files
// over gRPC and REST, so this runner checks exactly what the README promises and nothing more.

// testdata is the fixtures' directory; their schema and loader are pkg/builderfixture's.
const testdata = "testdata"

func TestFlowFixtures(t *testing.T) {
	for _, fx := range bf.Flows(t, testdata) {
		t.Run(fx.Name, func(t *testing.T) {
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

			got := []bf.Violation{}
			for _, v := range rep.Violations {
				assert.Equal(t, DocFlow, v.Doc)
				assert.NotEmpty(t, v.Message)
				got = append(got, bf.Violation{Reason: string(v.Reason), Pointer: v.Pointer.String()})
			}
			assert.Equal(t, bf.OrNone(fx.Expect.Violations), got, "violations")
			assert.Equal(t, bf.OrNone(fx.Expect.Runnables), runnablesOf(rep.Runnables), "runnables")
			tags := []bf.Tag{}
			for _, tg := range rep.Tags {
				tags = append(tags, bf.Tag{Tag: tg.Tag, Pointer: tg.Pointer.String()})
			}
			assert.Equal(t, bf.OrNone(fx.Expect.Tags), tags, "tags")
			pins := []bf.Pin{}
			for _, p := range rep.Pins {
				pins = append(pins, bf.Pin{Path: p.Path, Hash: p.Hash, Pointer: p.Pointer.String()})
			}
			assert.Equal(t, bf.OrNone(fx.Expect.Pins), pins, "pins")
			assertPointersResolve(t, fx.Value, flowPointers(rep))
		})
	}
}

func TestAppFixtures(t *testing.T) {
	for _, fx := range bf.Apps(t, testdata) {
		t.Run(fx.Name, func(t *testing.T) {
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

			got := []bf.Violation{}
			var valuePtrs, policyPtrs []string
			for _, v := range rep.Violations {
				assert.NotEmpty(t, v.Message)
				got = append(got, bf.Violation{Reason: string(v.Reason), Doc: string(v.Doc), Pointer: v.Pointer.String()})
				switch v.Doc {
				case DocAppValue:
					valuePtrs = append(valuePtrs, v.Pointer.String())
				case DocAppPolicy:
					policyPtrs = append(policyPtrs, v.Pointer.String())
				default:
					t.Errorf("app violation with doc %q", v.Doc)
				}
			}
			assert.Equal(t, bf.OrNone(fx.Expect.Violations), got, "violations")
			assert.Equal(t, bf.OrNone(fx.Expect.PolicyPaths), runnablesOf(rep.PolicyPaths), "policy_paths")
			assert.Equal(t, bf.OrNone(fx.Expect.ValuePaths), runnablesOf(rep.ValuePaths), "value_paths")
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

func TestRequestFixtures(t *testing.T) {
	for _, fx := range bf.Requests(t, testdata) {
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

func runnablesOf(refs []RunnableRef) []bf.Runnable {
	out := []bf.Runnable{}
	for _, r := range refs {
		out = append(out, bf.Runnable{Kind: string(r.Kind), Path: r.Path, Pointer: r.Pointer.String()})
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
				str, ok := s.(string)
				require.True(t, ok, "scope %v is not a string", s)
				assert.False(t, isSDKReadScope(str), "scope %v must be stripped", s)
			}
		}
	}
}
