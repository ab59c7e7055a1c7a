package builder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// toAny converts the package's tree to encoding/json's generic form, so the two readers can be
// compared value for value.
func toAny(d *doc, i int32) any {
	switch d.kindOf(i) {
	case kNull:
		return nil
	case kTrue:
		return true
	case kFalse:
		return false
	case kNumber:
		return json.Number(d.src[d.nodes[i].a:d.nodes[i].b])
	case kString:
		return d.str(i)
	case kArray:
		out := []any{}
		for _, m := range d.elems(i) {
			out = append(out, toAny(d, m.val))
		}
		return out
	default:
		out := map[string]any{}
		for _, m := range d.elems(i) {
			out[d.key(m)] = toAny(d, m.val)
		}
		return out
	}
}

func stdDecode(t testing.TB, raw []byte) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}

func TestEscapePointerToken(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"a/b", "a~1b"},
		{"a~b", "a~0b"},
		{"~1", "~01"}, // a literal "~1" must not read back as "/"
		{"/~", "~1~0"},
		{"x:script/f/a", "x:script~1f~1a"},
	} {
		t.Run(c.in, func(t *testing.T) {
			assert.Equal(t, c.want, escapePointerToken(c.in))
			got, ok := resolvePointer(map[string]any{c.in: 1}, "/"+escapePointerToken(c.in))
			require.True(t, ok)
			assert.Equal(t, 1, got)
		})
	}
}

func TestParseAcceptsAndAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0.5e+10`, `1E3`, `"x"`,
		` { "a" : [ 1 , 2 , { "b" : null } ] , "c" : "d" } `,
		`{"esc":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","k\u0065y":1}`,
		`{"unicode":"日本語","emoji":"😀"}`,
		`[[[[[]]]]]`,
		`{"a":{"a":{"a":{}}}}`,
	} {
		t.Run(in, func(t *testing.T) {
			d, err := parseDoc([]byte(in), DocFlow, DefaultLimits())
			require.NoError(t, err)
			assert.Equal(t, stdDecode(t, []byte(in)), toAny(d, root))
		})
	}
}

func TestParseRefuses(t *testing.T) {
	deep := func(open, close string, n int) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	for _, c := range []struct {
		name, in, rule string
	}{
		{"empty", ``, "unexpected end"},
		{"trailing data", `{} {}`, "after the JSON value"},
		{"trailing comma", `[1,]`, "unexpected character"},
		{"single quotes", `{'a':1}`, "string key"},
		{"comment", `{"a":1 /* x */}`, "expected , or }"},
		{"leading zero", `01`, "after the JSON value"},
		{"bare dot", `1.`, "invalid number"},
		{"NaN", `NaN`, "unexpected character"},
		{"control char", "\"a\tb\"", "control character"},
		{"bad escape", `"\x"`, "invalid escape"},
		{"short unicode escape", `"\u12"`, "invalid \\u escape"},
		{"unterminated", `{"a":"b`, "unterminated string"},
		{"BOM", "\ufeff{}", "unexpected character"},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", "not valid UTF-8"},
		{"NUL in value", `{"a":"x\u0000y"}`, "NUL"},
		{"NUL in key", `{"inline\u0000Script":1}`, "NUL"},
		{"lone high surrogate", `"\ud800"`, "lone high surrogate"},
		{"high surrogate then ascii", `"\ud800\u0041"`, "lone high surrogate"},
		{"lone low surrogate", `"\udc00"`, "lone low surrogate"},
		{"duplicate key", `{"type":"script","type":"rawscript"}`, "duplicate key"},
		{"duplicate key via escape", `{"type":"script","typ\u0065":"rawscript"}`, "duplicate key"},
		{"duplicate key nested", `{"a":[{"b":1,"c":2,"b":3}]}`, "duplicate key"},
		{"array depth 10000", deep("[", "]", 10000), "nesting deeper"},
		{"object depth 10000", strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), "nesting deeper"},
		{"unbalanced deep", strings.Repeat("[", 10000), "nesting deeper"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseDoc([]byte(c.in), DocFlow, DefaultLimits())
			var ie *InputError
			require.ErrorAs(t, err, &ie)
			assert.Contains(t, ie.Rule, c.rule)
			assert.Equal(t, DocFlow, ie.Doc)
		})
	}
}

// TestParseNumberRange: a number beyond a 64-bit float's range is refused where it starts, as
// the platform's reader and encoding/json refuse it (the fuzzer found "2" and 310 zeros accepted);
// the largest float, long numbers that fit, and underflow to 0 are accepted as they accept them.
func TestParseNumberRange(t *testing.T) {
	const rule = "number out of range: beyond a 64-bit float (about ±1.8e308)"
	for _, c := range []struct {
		name, in string
		at       int // byte offset of the refused number; -1: accepted
	}{
		{"fuzz 2e310 as digits", "2" + strings.Repeat("0", 310), 0},
		{"309 digits over max", "2" + strings.Repeat("0", 308), 0},
		{"exponent", `1e309`, 0},
		{"negative", `-1e309`, 0},
		{"fraction and exponent", `1.8e308`, 0},
		{"nested in a flow", `{"modules":[],"x":[1,1E+400]}`, 21},
		{"a megabyte of digits", "1" + strings.Repeat("0", 1<<20), 0},
		{"largest float", `1.7976931348623157e308`, -1},
		{"negative largest float", `-1.7976931348623157e308`, -1},
		{"308 nines", strings.Repeat("9", 308), -1},
		{"1e308 as digits", "1" + strings.Repeat("0", 308), -1},
		{"many leading fraction zeros", "0." + strings.Repeat("0", 400) + "1e400", -1},
		{"underflow", `1e-400`, -1},
		{"zero with a huge exponent", `0e99999`, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseDoc([]byte(c.in), DocFlow, DefaultLimits())
			stdErr := json.Unmarshal([]byte(c.in), new(any))
			if c.at < 0 {
				require.NoError(t, err)
				require.NoError(t, stdErr, "encoding/json accepts it too")
				return
			}
			require.Error(t, stdErr, "encoding/json refuses it too")
			var ie *InputError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, DocFlow, ie.Doc)
			assert.Equal(t, fmt.Sprintf("malformed JSON at byte %d: %s", c.at, rule), ie.Rule)
			assert.Empty(t, ie.Pointer, "parser refusals are located by byte offset")
			assert.False(t, ie.Limit, "a shape refusal (INVALID_FIELD), not a configured limit")
		})
	}
}

func TestParseDepthBoundary(t *testing.T) {
	lim := DefaultLimits()
	at := strings.Repeat("[", lim.MaxJSONDepth) + strings.Repeat("]", lim.MaxJSONDepth)
	_, err := parseDoc([]byte(at), DocFlow, lim)
	require.NoError(t, err, "exactly the limit is accepted")
	over := "[" + at + "]"
	_, err = parseDoc([]byte(over), DocFlow, lim)
	require.Error(t, err)
	// A bracket inside a string is not nesting.
	_, err = parseDoc([]byte(`["`+strings.Repeat("[", 20000)+`"]`), DocFlow, lim)
	require.NoError(t, err)
}

func TestParseSizeLimit(t *testing.T) {
	big := []byte(`{"modules":[],"pad":"` + strings.Repeat("x", 5<<20) + `"}`)
	_, err := WalkFlow(big, Limits{})
	var ie *InputError
	require.ErrorAs(t, err, &ie)
	assert.Contains(t, ie.Rule, "bytes")
	_, err = WalkApp(big, nil, Limits{}, AppOptions{})
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, DocAppValue, ie.Doc)
	_, err = WalkApp([]byte(`{}`), big, Limits{}, AppOptions{})
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, DocAppPolicy, ie.Doc)
	// A configured limit is honoured, and a huge one is clamped rather than trusted.
	_, err = WalkFlow([]byte(`{"modules":[]}`), Limits{MaxBytes: 5})
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, hardMaxBytes, Limits{MaxBytes: 1 << 40}.resolved().MaxBytes)
	assert.Equal(t, hardMaxJSONDepth, Limits{MaxJSONDepth: 1 << 30}.resolved().MaxJSONDepth)
}

func TestParseLargeObjectDuplicates(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{`)
	for i := 0; i < 200; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		// Each member holds a large object of its own, so the per-object key sets nest.
		b.WriteString(`"k` + strconv.Itoa(i) + `":{`)
		for j := 0; j < 40; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"n` + strconv.Itoa(j) + `":` + strconv.Itoa(j))
		}
		b.WriteString(`}`)
	}
	ok := b.String() + `}`
	d, err := parseDoc([]byte(ok), DocFlow, DefaultLimits())
	require.NoError(t, err)
	assert.Len(t, d.elems(root), 200)
	_, err = parseDoc([]byte(b.String()+`,"k7":1}`), DocFlow, DefaultLimits())
	require.Error(t, err, "a duplicate after nested large objects is still caught")
	_, err = parseDoc([]byte(b.String()+`,"k\u0037":1}`), DocFlow, DefaultLimits())
	require.Error(t, err, "and so is an escaped one")
}

func TestWriteRawRoundTrips(t *testing.T) {
	in := `{ "n" : 1.50 , "e":"a\u00e9\"b", "arr":[ true,false,null,{"x":-0}], "k\u0065y" : {} }`
	d, err := parseDoc([]byte(in), DocAppPolicy, DefaultLimits())
	require.NoError(t, err)
	out := d.writeRaw(nil, root)
	assert.JSONEq(t, `{"n":1.50,"e":"a\u00e9\"b","arr":[true,false,null,{"x":-0}],"k\u0065y":{}}`, string(out))
	assert.Equal(t, stdDecode(t, []byte(in)), stdDecode(t, out))
}
