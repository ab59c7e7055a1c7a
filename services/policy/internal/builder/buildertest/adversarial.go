package buildertest

import (
	"fmt"
	"strings"
)

// The generators below build the worst inputs found for each walk and parser, as a function of
// a scale s: the input grows linearly in s, and a walk whose cost is quadratic in some dimension
// (pointer length times findings, key length times candidates) shows it as s grows. The cost
// tests run them at s = 1, 4 and 16 and assert that bytes allocated and answer size grow at
// most linearly.

// longKey is a JSON object key of n bytes, distinct per i.
func longKey(i, n int) string {
	k := fmt.Sprintf("k%d_", i)
	return k + strings.Repeat("x", n-len(k))
}

// nested wraps inner in depth objects with keyBytes-long keys.
func nested(depth, keyBytes int, inner string) string {
	var b strings.Builder
	for i := 0; i < depth; i++ {
		fmt.Fprintf(&b, `{"%s":`, longKey(i, keyBytes))
	}
	b.WriteString(inner)
	b.WriteString(strings.Repeat("}", depth))
	return b.String()
}

func repeatJoin(n int, item func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = item(i)
	}
	return strings.Join(parts, ",")
}

// FlowDeepSweep is a flow whose code leaves sit under nested objects with long keys, in a field
// the structural walk does not interpret: the sweep finds every leaf, and a walk that renders a
// full pointer per finding allocates leaves x depth x key bytes.
func FlowDeepSweep(s int) []byte {
	leaves := `[` + repeatJoin(64*s, func(int) string { return `{"type":"rawscript"}` }) + `]`
	return []byte(`{"modules":[],"extra":` + nested(8*s, 128, leaves) + `}`)
}

// FlowDeepSteps nests loops as deep as the module depth allows and puts s*200 script steps at
// the bottom: every reference's pointer is as long as the nesting.
func FlowDeepSteps(s int) []byte {
	const depth = 60
	steps := repeatJoin(200*s, func(i int) string {
		return fmt.Sprintf(`{"value":{"type":"script","path":"f/a/s%d","tag_override":"t"}}`, i)
	})
	inner := `[` + steps + `]`
	for i := 0; i < depth; i++ {
		inner = `[{"value":{"type":"forloopflow","modules":` + inner + `}}]`
	}
	return []byte(`{"modules":` + inner + `}`)
}

// FlowDeepRawscripts is FlowDeepSteps with rawscript steps: every one is a structural finding.
func FlowDeepRawscripts(s int) []byte {
	const depth = 60
	inner := `[` + repeatJoin(200*s, func(int) string { return `{"value":{"type":"rawscript"}}` }) + `]`
	for i := 0; i < depth; i++ {
		inner = `[{"value":{"type":"forloopflow","modules":` + inner + `}}]`
	}
	return []byte(`{"modules":` + inner + `}`)
}

// AppColonKeys is an app policy with 8 triggerables_v2 keys of 64*s bytes, each a chain of
// "script/a:" segments: every ':' starts another candidate whose path is the rest of the key.
func AppColonKeys(s int) (value, policy []byte) {
	seg := "script/a:"
	keyLen := 64 * s
	keys := repeatJoin(8, func(i int) string {
		k := strings.Repeat(seg, keyLen/len(seg)+1)[:keyLen-2] + fmt.Sprint(i%10) + "z"
		return fmt.Sprintf(`"%s":{}`, k)
	})
	return []byte(`{}`), []byte(`{"execution_mode":"publisher","triggerables_v2":{` + keys + `}}`)
}

// AppDeepInline is an app value whose inline scripts sit under nested objects with long keys.
func AppDeepInline(s int) (value, policy []byte) {
	leaves := `[` + repeatJoin(64*s, func(int) string { return `{"inlineScript":{"content":"x","language":"deno"}}` }) + `]`
	return []byte(nested(8*s, 128, leaves)), []byte(`{}`)
}

// AppManyKeys is an app policy with 200*s distinct script triggerables, each its own reference.
func AppManyKeys(s int) (value, policy []byte) {
	keys := repeatJoin(200*s, func(i int) string { return fmt.Sprintf(`"c%d:script/f/a/s%d":{}`, i, i) })
	return []byte(`{}`), []byte(`{"triggerables_v2":{` + keys + `}}`)
}

// PreviewColonPath is a preview path of 64*s bytes made of "script/a:" segments.
func PreviewColonPath(s int) string {
	return strings.Repeat("script/a:", 64*s/9+1)[:64*s-1] + "z"
}

// JSONWideObject is one object with 400*s distinct keys (the parser's duplicate-key set) inside
// a flow's static data, plus an array of as many escaped strings.
func JSONWideObject(s int) []byte {
	keys := repeatJoin(400*s, func(i int) string { return fmt.Sprintf(`"key_%d":%d`, i, i) })
	strs := repeatJoin(400*s, func(i int) string { return `"a\u00e9\n\"b"` })
	return []byte(`{"modules":[],"o":{` + keys + `},"a":[` + strs + `]}`)
}

// JSONDeep is nesting as deep as the parser allows (fixed) under growing arrays of small
// objects, so the tree size grows with s.
func JSONDeep(s int) []byte {
	items := repeatJoin(300*s, func(i int) string { return fmt.Sprintf(`{"a":[%d,{"b":null}]}`, i) })
	return []byte(`{"modules":[],"d":` + strings.Repeat("[", 400) + items + strings.Repeat("]", 400) + `}`)
}
