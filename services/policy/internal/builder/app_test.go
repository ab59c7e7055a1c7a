package builder

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWalkAppInputErrors(t *testing.T) {
	for _, c := range []struct {
		name, value, policy string
		doc                 Doc
		ptr                 string
	}{
		{"value not JSON", `{`, `{}`, DocAppValue, ""},
		{"value array", `[]`, `{}`, DocAppValue, ""},
		{"value null", `null`, `{}`, DocAppValue, ""},
		{"policy array", `{}`, `[]`, DocAppPolicy, ""},
		{"policy not JSON", `{}`, `{"a"`, DocAppPolicy, ""},
		{"execution_mode number", `{}`, `{"execution_mode":1}`, DocAppPolicy, "/execution_mode"},
		{"execution_mode unknown", `{}`, `{"execution_mode":"admin"}`, DocAppPolicy, "/execution_mode"},
		{"triggerables array", `{}`, `{"triggerables":[]}`, DocAppPolicy, "/triggerables"},
		{"triggerables_v2 string", `{}`, `{"triggerables_v2":"script/x"}`, DocAppPolicy, "/triggerables_v2"},
		{"sdk scopes not array", `{}`, `{"frontend_sdk_scopes":"jobs:run"}`, DocAppPolicy, "/frontend_sdk_scopes"},
		{"sdk scope not string", `{}`, `{"frontend_sdk_scopes":["jobs:run",1]}`, DocAppPolicy, "/frontend_sdk_scopes/1"},
		{"duplicate policy key", `{}`, `{"execution_mode":"publisher","execution_mode":"viewer"}`, DocAppPolicy, ""},
		{"duplicate value key", `{"runnables":{"a":{"type":"runnableByPath","path":"f/x","path":"f/y"}}}`, `{}`, DocAppValue, ""},
		{"NUL-split inlineScript key", `{"grid":[{"inline\u0000Script":{"content":"x"}}]}`, `{}`, DocAppValue, ""},
		{"runnable path not string", `{"runnables":{"a":{"type":"runnableByPath","path":["f/x"]}}}`, `{}`, DocAppValue, "/runnables/a/path"},
		{"unknown runType", `{"runnables":{"a":{"type":"runnableByPath","runType":"app","path":"f/x"}}}`, `{}`, DocAppValue, "/runnables/a/runType"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := WalkApp([]byte(c.value), []byte(c.policy), Limits{}, AppOptions{})
			var ie *InputError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, c.doc, ie.Doc, ie.Error())
			assert.Equal(t, c.ptr, ie.Pointer, ie.Error())
		})
	}
}

func TestWalkAppEmptyPolicy(t *testing.T) {
	for _, p := range []string{"", "  ", "null", " null ", "{}"} {
		t.Run(p, func(t *testing.T) {
			rep, err := WalkApp([]byte(`{}`), []byte(p), Limits{}, AppOptions{StripSDKReadScopes: true})
			require.NoError(t, err)
			assert.Equal(t, "publisher", rep.ExecutionMode)
			assert.JSONEq(t, `{"sandbox":true,"execution_mode":"publisher"}`, string(rep.NormalizedPolicy))
			assert.True(t, rep.Composable())
		})
	}
	rep, err := WalkApp([]byte(`{}`), []byte(`{"execution_mode":null}`), Limits{}, AppOptions{})
	require.NoError(t, err)
	assert.Equal(t, "publisher", rep.ExecutionMode, "null is omitted")
	assert.JSONEq(t, `{"execution_mode":"publisher","sandbox":true}`, string(rep.NormalizedPolicy),
		"an omitted or null mode is pinned: on update the platform would keep the stored one, viewer included")
}

func TestNormalizedPolicyPreservesWhatItDoesNotOwn(t *testing.T) {
	in := `{ "on_behalf_of" : "u/a\u00e9", "n": 1.50, "sandb\u006fx": false, "frontend_sdk_scopes": ["jobs:run", "variables:read", "variables:read:f/x", "resources:*", "*", "users:read"], "z": [1, {"k": null}] }`
	rep, err := WalkApp([]byte(`{}`), []byte(in), Limits{}, AppOptions{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"on_behalf_of":"u/a\u00e9","n":1.50,"sandb\u006fx":true,"frontend_sdk_scopes":["jobs:run","variables:read","variables:read:f/x","resources:*","*","users:read"],"z":[1,{"k":null}],"execution_mode":"publisher"}`,
		string(rep.NormalizedPolicy), "sandbox forced in place (even when its key is escaped), scopes kept when not asked")

	rep, err = WalkApp([]byte(`{}`), []byte(in), Limits{}, AppOptions{StripSDKReadScopes: true})
	require.NoError(t, err)
	assert.JSONEq(t, `{"on_behalf_of":"u/a\u00e9","n":1.50,"sandb\u006fx":true,"frontend_sdk_scopes":["jobs:run","users:read"],"z":[1,{"k":null}],"execution_mode":"publisher"}`,
		string(rep.NormalizedPolicy), "every scope covering variables:read / resources:read is stripped")

	rep, err = WalkApp([]byte(`{}`), []byte(`{"execution_mode":"publisher"}`), Limits{}, AppOptions{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"execution_mode":"publisher","sandbox":true}`, string(rep.NormalizedPolicy), "sandbox appended when absent")
}

// plainRef is a RunnableRef with its pointer rendered, for comparisons.
type plainRef struct {
	Kind    RunnableKind
	Path    string
	Pointer string
}

func plainRefs(rs []RunnableRef) []plainRef {
	var out []plainRef
	for _, r := range rs {
		out = append(out, plainRef{r.Kind, r.Path, r.Pointer.String()})
	}
	return out
}

func TestTriggerableKeys(t *testing.T) {
	for _, c := range []struct {
		key        string
		violations []string
		paths      []plainRef
	}{
		{"script/f/a", nil, []plainRef{{KindScript, "f/a", "/triggerables_v2/script~1f~1a"}}},
		{"c:flow/f/a", nil, []plainRef{{KindFlow, "f/a", "/triggerables_v2/c:flow~1f~1a"}}},
		{"a:b:script/u/x", nil, []plainRef{{KindScript, "u/x", "/triggerables_v2/a:b:script~1u~1x"}}},
		{"rawscript/abc", []string{"RAWSCRIPT_KEY /triggerables_v2/rawscript~1abc"}, nil},
		{"c:rawscript/abc", []string{"RAWSCRIPT_KEY /triggerables_v2/c:rawscript~1abc"}, nil},
		{"c d:rawscript/abc", []string{"RAWSCRIPT_KEY /triggerables_v2/c d:rawscript~1abc"}, nil},
		{"rawscript/x:script/f/a", []string{"RAWSCRIPT_KEY /triggerables_v2/rawscript~1x:script~1f~1a"}, []plainRef{{KindScript, "f/a", "/triggerables_v2/rawscript~1x:script~1f~1a"}}},
		// A reading whose path contains ':' can name no runnable (paths have no ':'): it is
		// refused, not looked up, and only the reading after the last ':' is a reference.
		{"script/f/a:flow/f/b", []string{"UNKNOWN_TRIGGERABLE /triggerables_v2/script~1f~1a:flow~1f~1b"}, []plainRef{{KindFlow, "f/b", "/triggerables_v2/script~1f~1a:flow~1f~1b"}}},
		{"script/hub/1/x", []string{"HUB_PATH /triggerables_v2/script~1hub~11~1x"}, []plainRef{{KindScript, "hub/1/x", "/triggerables_v2/script~1hub~11~1x"}}},
		// hubscript/ is a hub script, as CheckPreview reads it.
		{"hubscript/1/x", []string{"HUB_PATH /triggerables_v2/hubscript~11~1x"}, nil},
		{"c:hubscript/1/x", []string{"HUB_PATH /triggerables_v2/c:hubscript~11~1x"}, nil},
		// Unknown means refuse: a key the check cannot read is not skipped.
		{"component_only", []string{"UNKNOWN_TRIGGERABLE /triggerables_v2/component_only"}, nil},
		{"c:app/f/x", []string{"UNKNOWN_TRIGGERABLE /triggerables_v2/c:app~1f~1x"}, nil},
		{"Rawscript/abc", []string{"UNKNOWN_TRIGGERABLE /triggerables_v2/Rawscript~1abc"}, nil},
	} {
		t.Run(c.key, func(t *testing.T) {
			policy := `{"triggerables_v2":{` + jsonString(c.key) + `:{}}}`
			rep, err := WalkApp([]byte(`{}`), []byte(policy), Limits{}, AppOptions{})
			require.NoError(t, err)
			want := c.violations
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, reasons(rep.Violations))
			assert.Equal(t, c.paths, plainRefs(rep.PolicyPaths))
		})
	}
}

func jsonString(s string) string {
	d := []byte{'"'}
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			d = append(d, '\\')
		}
		d = append(d, c)
	}
	return string(append(d, '"'))
}

func TestAppInlineCodeRule(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        []string
	}{
		{"inlineScript null is still the key", `{"grid":[{"data":{"runnable":{"type":"runnableByName","inlineScript":null}}}]}`, []string{"INLINE_CODE /grid/0/data/runnable/inlineScript"}},
		{"inlineScript empty object", `{"x":{"inlineScript":{}}}`, []string{"INLINE_CODE /x/inlineScript"}},
		{"inlineScript and content+language reported once", `{"x":{"inlineScript":{"content":"c","language":"bun"}}}`, []string{"INLINE_CODE /x/inlineScript"}},
		{"content null next to language", `{"x":{"language":"bun","content":null}}`, []string{}},
		{"content without language outside containers", `{"x":{"content":"# Title"}}`, []string{}},
		{"markdown-like static text", `{"grid":[{"data":{"type":"textcomponent","componentInput":{"type":"static","value":"# hi"}}}]}`, []string{}},
		{"code next to language", `{"x":{"language":"sql","code":"select 1"}}`, []string{"INLINE_CODE /x"}},
		{"language null with content", `{"x":{"language":null,"content":"x"}}`, []string{"INLINE_CODE /x"}},
		{"runnableByName with content", `{"x":{"type":"runnableByName","content":"x"}}`, []string{"INLINE_CODE /x"}},
		{"inline with code", `{"x":{"type":"inline","code":"x"}}`, []string{"INLINE_CODE /x"}},
		{"hidden entry with bare content", `{"hiddenInlineScripts":[{"name":"a","content":"x"}]}`, []string{"INLINE_CODE /hiddenInlineScripts/0"}},
		{"unused entry", `{"unusedInlineScripts":[{"name":"a","inlineScript":{"content":"x","language":"deno"}}]}`, []string{"INLINE_CODE /unusedInlineScripts/0/inlineScript"}},
		{"legacy raw app inlineScripts map", `{"type":"rawapp","inlineScripts":{"a":{"content":"x"}}}`, []string{"INLINE_CODE /inlineScripts/a"}},
		{"raw files are the bundle, not inline scripts", `{"files":{"/index.tsx":"export default 1","/content":"x"},"runnables":{}}`, []string{}},
		{"expressions are allowed", `{"grid":[{"data":{"configuration":{"disabled":{"type":"eval","expr":"a.b"},"x":{"type":"evalv2","expr":"c.d","connections":[]}}}}]}`, []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := WalkApp([]byte(c.value), nil, Limits{}, AppOptions{})
			require.NoError(t, err)
			assert.Equal(t, c.want, reasons(rep.Violations))
			assertPointersResolve(t, []byte(c.value), violationPointers(rep.Violations))
		})
	}
}

func violationPointers(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Pointer.String())
	}
	return out
}

func TestAppValuePaths(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        []plainRef
	}{
		{"runnableByPath without runType is a script", `{"grid":[{"r":{"type":"runnableByPath","path":"f/a"}}]}`, []plainRef{{KindScript, "f/a", "/grid/0/r"}}},
		{"theme path is not a runnable", `{"theme":{"type":"path","path":"f/app_themes/theme_0"}}`, nil},
		{"path entry of runnables without runType", `{"runnables":{"r":{"type":"path","path":"f/a"}}}`, []plainRef{{KindScript, "f/a", "/runnables/r"}}},
		{"path with runType anywhere", `{"x":[{"type":"path","runType":"flow","path":"f/a"}]}`, []plainRef{{KindFlow, "f/a", "/x/0"}}},
		{"runnableByPath without path", `{"r":{"type":"runnableByPath","path":null}}`, nil},
		{"in static data too", `{"grid":[{"data":{"componentInput":{"type":"static","value":{"type":"runnableByPath","path":"f/b"}}}}]}`, []plainRef{{KindScript, "f/b", "/grid/0/data/componentInput/value"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := WalkApp([]byte(c.value), nil, Limits{}, AppOptions{})
			require.NoError(t, err)
			assert.Equal(t, c.want, plainRefs(rep.ValuePaths))
		})
	}
}

func TestAppKind(t *testing.T) {
	for _, c := range []struct {
		value string
		want  AppKind
	}{
		{`{"files":{},"runnables":{}}`, AppRaw},
		{`{"type":"rawapp"}`, AppRaw},
		{`{"grid":[],"subgrids":{}}`, AppLowCode},
		{`{"grid":[],"runnables":{}}`, AppUnknown},
		{`{}`, AppUnknown},
	} {
		rep, err := WalkApp([]byte(c.value), nil, Limits{}, AppOptions{})
		require.NoError(t, err)
		assert.Equal(t, c.want, rep.Kind, c.value)
	}
}
