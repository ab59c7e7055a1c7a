package builder

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func reasons(vs []Violation) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, string(v.Reason)+" "+v.Pointer.String())
	}
	return out
}

func TestWalkFlowInputErrors(t *testing.T) {
	step := func(v string) string { return `{"modules":[{"id":"a","value":` + v + `}]}` }
	for _, c := range []struct {
		name, in, ptr string
	}{
		{"not JSON", `{"modules":[`, ""},
		{"array", `[]`, ""},
		{"string", `"modules"`, ""},
		{"null", `null`, ""},
		{"no modules", `{"failure_module":null}`, "/modules"},
		{"modules not array", `{"modules":{}}`, "/modules"},
		{"modules null", `{"modules":null}`, "/modules"},
		{"module not object", `{"modules":[1]}`, "/modules/0"},
		{"module without value", `{"modules":[{"id":"a"}]}`, "/modules/0/value"},
		{"value not object", step(`"rawscript"`), "/modules/0/value"},
		{"failure module not object", `{"modules":[],"failure_module":[]}`, "/failure_module"},
		{"script without path", step(`{"type":"script"}`), "/modules/0/value/path"},
		{"flow path not string", step(`{"type":"flow","path":1}`), "/modules/0/value/path"},
		{"hash not string", step(`{"type":"script","path":"f/x","hash":123}`), "/modules/0/value/hash"},
		{"hash 15 digits", step(`{"type":"script","path":"f/x","hash":"00000000000007b"}`), "/modules/0/value/hash"},
		{"hash not hex", step(`{"type":"script","path":"f/x","hash":"000000000000007g"}`), "/modules/0/value/hash"},
		{"tag_override not string", step(`{"type":"script","path":"f/x","tag_override":["gpu"]}`), "/modules/0/value/tag_override"},
		{"rawscript tag not string", step(`{"type":"rawscript","content":"","language":"bun","tag":{}}`), "/modules/0/value/tag"},
		{"loop without modules", step(`{"type":"forloopflow","iterator":{"type":"static","value":[]}}`), "/modules/0/value/modules"},
		{"loop modules not array", step(`{"type":"whileloopflow","modules":"x"}`), "/modules/0/value/modules"},
		{"branchone without default", step(`{"type":"branchone","branches":[]}`), "/modules/0/value/default"},
		{"branches not array", step(`{"type":"branchall","branches":{}}`), "/modules/0/value/branches"},
		{"branch not object", step(`{"type":"branchall","branches":[[]]}`), "/modules/0/value/branches/0"},
		{"branch without modules", step(`{"type":"branchall","branches":[{"expr":"true"}]}`), "/modules/0/value/branches/0/modules"},
		{"tools not array", step(`{"type":"aiagent","tools":{}}`), "/modules/0/value/tools"},
		{"tool not object", step(`{"type":"aiagent","tools":["x"]}`), "/modules/0/value/tools/0"},
		{"tool without value", step(`{"type":"aiagent","tools":[{"id":"t"}]}`), "/modules/0/value/tools/0/value"},
		{"tool value not object", step(`{"type":"aiagent","tools":[{"id":"t","value":null}]}`), "/modules/0/value/tools/0/value"},
		{"wrapper value not object", `{"value":[],"schema":{}}`, "/value"},
		{"wrapper without modules", `{"value":{},"schema":{}}`, "/value/modules"},
		{"both forms", `{"modules":[],"value":{"modules":[]}}`, "/value"},
		{"value and flow_value", `{"value":{"modules":[]},"flow_value":{"modules":[]}}`, "/flow_value"},
		{"wrapper tag not string", `{"value":{"modules":[]},"tag":1}`, "/tag"},
		{"duplicate type key", step(`{"type":"script","path":"f/x","type":"rawscript","content":"x","language":"bun"}`), ""},
		{"NUL-split node key", step(`{"type":"forloopflow","iterator":{"type":"static","value":[]},"modules":[],"modules\u0000_node":7}`), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := WalkFlow([]byte(c.in), Limits{})
			var ie *InputError
			require.ErrorAs(t, err, &ie, "got report %v", reasons(rep.Violations))
			assert.Equal(t, c.ptr, ie.Pointer, ie.Error())
			assert.Equal(t, DocFlow, ie.Doc)
			assert.Empty(t, rep.Violations, "an input error returns no partial report")
		})
	}
}

// A key or value spelled with JSON escapes means the same to the platform, so it must mean the
// same to the walk.
func TestWalkFlowEscapedSpellings(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"escaped type value", `{"modules":[{"value":{"type":"r\u0061wscript","content":"x","language":"bun"}}]}`, "INLINE_CODE /modules/0/value"},
		{"escaped modules key", `{"modul\u0065s":[{"value":{"type":"flowscript","id":1,"language":"bun"}}]}`, "NODE_REFERENCE /modules/0/value"},
		{"escaped node key", `{"modules":[{"value":{"type":"identity","default\u005fnode":3}}]}`, "NODE_REFERENCE /modules/0/value/default_node"},
		{"escaped hub path", `{"modules":[{"value":{"type":"script","path":"hub\/1\/x"}}]}`, "HUB_PATH /modules/0/value/path"},
		{"escaped slash in key pointer", `{"modules":[],"a\/b":{"type":"rawscript"}}`, "INLINE_CODE /a~1b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := WalkFlow([]byte(c.in), Limits{})
			require.NoError(t, err)
			assert.Equal(t, []string{c.want}, reasons(rep.Violations))
		})
	}
}

func nestedLoops(depth int) string {
	open := `{"type":"forloopflow","iterator":{"type":"static","value":[]},"parallel":false,"modules":[{"id":"l","value":`
	return `{"modules":[{"id":"top","value":` + strings.Repeat(open, depth-1) +
		`{"type":"script","path":"f/x/leaf"}` + strings.Repeat(`}]}`, depth-1) + `}]}`
}

func TestWalkFlowModuleDepthLimit(t *testing.T) {
	lim := DefaultLimits()
	rep, err := WalkFlow([]byte(nestedLoops(lim.MaxModuleDepth)), Limits{})
	require.NoError(t, err, "exactly the module depth limit is accepted")
	require.Len(t, rep.Runnables, 1)

	_, err = WalkFlow([]byte(nestedLoops(lim.MaxModuleDepth+1)), Limits{})
	var ie *InputError
	require.ErrorAs(t, err, &ie)
	assert.Contains(t, ie.Rule, "deeper than 64")

	// Agent tools nest too: an agent whose tool is an agent whose tool is ...
	s := `{"type":"identity"}`
	for i := 0; i < 70; i++ {
		s = `{"type":"aiagent","tools":[{"id":"t","value":` + s + `}]}`
	}
	_, err = WalkFlow([]byte(`{"modules":[{"value":`+s+`}]}`), Limits{})
	require.ErrorAs(t, err, &ie)
	assert.Contains(t, ie.Rule, "deeper than")

	// 10,000 nested loops: refused by the JSON depth pre-scan, no stack growth.
	_, err = WalkFlow([]byte(nestedLoops(10_000)), Limits{})
	require.ErrorAs(t, err, &ie)
	assert.Contains(t, ie.Rule, "nesting deeper")
}

func TestWalkFlowModuleCountLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"modules":[`)
	for i := 0; i < 11; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"value":{"type":"identity"}}`)
	}
	b.WriteString(`]}`)
	_, err := WalkFlow([]byte(b.String()), Limits{MaxModules: 11})
	require.NoError(t, err)
	_, err = WalkFlow([]byte(b.String()), Limits{MaxModules: 10})
	var ie *InputError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "/modules/10", ie.Pointer)
	// Tools count as modules.
	_, err = WalkFlow([]byte(`{"modules":[{"value":{"type":"aiagent","tools":[{"id":"a","value":{"tool_type":"websearch"}}]}}]}`), Limits{MaxModules: 1})
	require.ErrorAs(t, err, &ie)
}

// Every violation is found and counted, the first MaxFindings listed in walk order: a document
// with thousands of findings answers a hundred, not thousands.
func TestWalkFlowReportsEveryViolation(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"modules":[`)
	const n = 500
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":"s%d","value":{"type":"rawscript","content":"x","language":"bun"}}`, i)
	}
	b.WriteString(`]}`)
	rep, err := WalkFlow([]byte(b.String()), Limits{})
	require.NoError(t, err)
	require.Len(t, rep.Violations, DefaultLimits().MaxFindings)
	assert.Equal(t, n-DefaultLimits().MaxFindings, rep.ViolationsOmitted)
	assert.False(t, rep.Composable())
	for i, v := range rep.Violations {
		assert.Equal(t, fmt.Sprintf("/modules/%d/value", i), v.Pointer.String())
	}
}

func TestWalkFlowSweepDoesNotRepeatStructuralFindings(t *testing.T) {
	// The structural walk reports the rawscript, the node id and the flowscript; the sweep must
	// not report them a second time.
	in := `{"modules":[{"value":{"type":"whileloopflow","modules_node":1,"modules":[
		{"value":{"type":"rawscript","content":"x","language":"bun"}},
		{"value":{"type":"flowscript","id":2,"language":"bun"}}]}}]}`
	rep, err := WalkFlow([]byte(in), Limits{})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"NODE_REFERENCE /modules/0/value/modules_node",
		"INLINE_CODE /modules/0/value/modules/0/value",
		"NODE_REFERENCE /modules/0/value/modules/1/value",
	}, reasons(rep.Violations))
}

func TestWalkFlowSweepFindsCodeInStaticData(t *testing.T) {
	// Documented false positive: a static input that looks like a rawscript module is refused.
	in := `{"modules":[{"value":{"type":"script","path":"f/x/deploy","input_transforms":{
		"spec":{"type":"static","value":{"type":"rawscript","content":"x","language":"bun"}}}}}]}`
	rep, err := WalkFlow([]byte(in), Limits{})
	require.NoError(t, err)
	assert.Equal(t, []string{"INLINE_CODE /modules/0/value/input_transforms/spec/value"}, reasons(rep.Violations))
}

func TestWalkFlowToolTypeFallback(t *testing.T) {
	for _, c := range []struct{ name, tool, want string }{
		{"websearch with type script is walked", `{"tool_type":"websearch","type":"script","path":"hub/1/x"}`, "HUB_PATH /modules/0/value/tools/0/value/path"},
		{"unknown tool type with rawscript", `{"tool_type":"other","type":"rawscript","content":"x","language":"bun"}`, "UNKNOWN_MODULE_TYPE /modules/0/value/tools/0/value/tool_type|INLINE_CODE /modules/0/value/tools/0/value"},
		{"non-string tool type", `{"tool_type":1}`, "UNKNOWN_MODULE_TYPE /modules/0/value/tools/0/value/tool_type"},
		{"null tool type is legacy", `{"tool_type":null,"type":"flowscript","id":1,"language":"bun"}`, "NODE_REFERENCE /modules/0/value/tools/0/value"},
		{"legacy tool without type", `{"path":"f/x"}`, "UNKNOWN_MODULE_TYPE /modules/0/value/tools/0/value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := WalkFlow([]byte(`{"modules":[{"value":{"type":"aiagent","tools":[{"id":"t","value":`+c.tool+`}]}}]}`), Limits{})
			require.NoError(t, err)
			assert.Equal(t, strings.Split(c.want, "|"), reasons(rep.Violations))
		})
	}
}

func TestFlowReportHelpers(t *testing.T) {
	rep, err := WalkFlow([]byte(`{"modules":[
		{"value":{"type":"script","path":"f/a","tag_override":"gpu","hash":"0000000000001092"}},
		{"value":{"type":"script","path":"f/a","tag_override":"gpu"}},
		{"value":{"type":"flow","path":"f/a"}},
		{"value":{"type":"aiagent","tag":"ai","tools":[{"id":"t","value":{"tool_type":"flowmodule","type":"script","path":"f/b"}}]}}]}`), Limits{})
	require.NoError(t, err)
	assert.True(t, rep.Composable())
	assert.Equal(t, []plainRef{
		{Kind: KindScript, Path: "f/a", Pointer: "/modules/0/value"},
		{Kind: KindFlow, Path: "f/a", Pointer: "/modules/2/value"},
		{Kind: KindScript, Path: "f/b", Pointer: "/modules/3/value/tools/0/value"},
	}, plainRefs(rep.DistinctPaths()))
	assert.Equal(t, []string{"gpu", "ai"}, rep.DistinctTags())
	require.Len(t, rep.Pins, 1)
	assert.Equal(t, int64(4242), rep.Pins[0].Int64())
	assert.Equal(t, int64(-1), PinRef{Hash: "ffffffffffffffff"}.Int64(), "the 64 bits are kept, as the platform's bigint")
}

// The report must not alias the caller's buffer: a pooled or reused request buffer overwritten
// after the check must not change what was authorized.
func TestReportDoesNotAliasInput(t *testing.T) {
	raw := []byte(`{"value":{"modules":[{"value":{"type":"script","path":"f/x/s","hash":"000000000000007b","tag_override":"gpu"}}]},"tag":"t"}`)
	rep, err := WalkFlow(raw, Limits{})
	require.NoError(t, err)
	before := fmt.Sprintf("%+v", rep)
	for i := range raw {
		raw[i] = 'X'
	}
	assert.Equal(t, before, fmt.Sprintf("%+v", rep))

	value := []byte(`{"runnables":{"r":{"type":"runnableByPath","path":"f/a"}}}`)
	policy := []byte(`{"execution_mode":"anonymous","triggerables_v2":{"c:script/f/b":{}}}`)
	arep, err := WalkApp(value, policy, Limits{}, AppOptions{})
	require.NoError(t, err)
	abefore := fmt.Sprintf("%+v %s", arep, arep.NormalizedPolicy)
	for i := range value {
		value[i] = 'X'
	}
	for i := range policy {
		policy[i] = 'X'
	}
	assert.Equal(t, abefore, fmt.Sprintf("%+v %s", arep, arep.NormalizedPolicy))
}
