package builder

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	bf "github.com/millwright/millwright/pkg/builderfixture"
)

// The fuzz targets check what must hold for every input, not just the fixtures: no panic, no
// hang, every pointer resolves in the document as an independent reader (encoding/json) sees it,
// and code the walk must refuse is refused wherever it sits.

func FuzzWalkFlow(f *testing.F) {
	for _, fx := range bf.Flows(f, testdata) {
		f.Add([]byte(fx.Value))
	}
	for _, s := range []string{
		`{"modules":[]}`,
		`{"value":{"modules":[{"value":{"type":"r\u0061wscript"}}]}}`,
		`{"modules":[{"value":{"type":"aiagent","tools":[{"id":"t","value":{"tool_type":"mcp","type":"flowscript"}}]}}]}`,
		`{"modules":[{"value":{"type":"script","path":"f/x","hash":"000000000000007B"}}]}`,
		`{"modules":[{"value":{"type":"script","type":"rawscript"}}]}`,
		`{"modules":[],"a/b~c":{"modules_node":1}}`,
		`[[[[[[[[[[]]]]]]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		rep, err := WalkFlow(raw, Limits{})
		if err != nil {
			if ie := (*InputError)(nil); !errors.As(err, &ie) {
				t.Fatalf("error is %T, want *InputError: %v", err, err)
			}
			if len(rep.Violations)+len(rep.Runnables)+len(rep.Tags)+len(rep.Pins) != 0 {
				t.Fatal("an input error must not come with a partial report")
			}
			return
		}
		// Accepted input is valid JSON to the standard reader too, and means the same.
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("accepted input that encoding/json rejects: %v", err)
		}
		for _, p := range flowPointers(rep) {
			if _, ok := resolvePointer(doc, p); !ok {
				t.Fatalf("pointer %q does not resolve", p)
			}
		}
		for _, r := range rep.Pins {
			if !isScriptHash(r.Hash) || strings.ToLower(r.Hash) != r.Hash {
				t.Fatalf("pin hash %q not normalized", r.Hash)
			}
		}
		// Wherever a rawscript or flowscript object or a populated node id sits, it is refused
		// at that very pointer.
		have := map[string]bool{}
		for _, v := range rep.Violations {
			have[string(v.Reason)+" "+v.Pointer.String()] = true
		}
		eachObject(doc, "", func(ptr string, obj map[string]any) {
			switch obj["type"] {
			case "rawscript":
				if !have["INLINE_CODE "+ptr] {
					t.Fatalf("rawscript at %q not refused; got %v", ptr, reasons(rep.Violations))
				}
			case "flowscript":
				if !have["NODE_REFERENCE "+ptr] {
					t.Fatalf("flowscript at %q not refused; got %v", ptr, reasons(rep.Violations))
				}
			}
			for _, k := range []string{"modules_node", "default_node"} {
				if v, ok := obj[k]; ok && v != nil && !have["NODE_REFERENCE "+ptr+"/"+k] {
					t.Fatalf("%s at %q not refused; got %v", k, ptr, reasons(rep.Violations))
				}
			}
			if v, ok := obj["x-windmill-dyn-select-code"]; ok && v != nil && !have["INLINE_CODE "+ptr+"/x-windmill-dyn-select-code"] {
				t.Fatalf("dyn select code at %q not refused", ptr)
			}
		})
	})
}

func FuzzWalkApp(f *testing.F) {
	for _, fx := range bf.Apps(f, testdata) {
		f.Add([]byte(fx.Value), []byte(fx.Policy), false)
	}
	f.Add([]byte(`{"x":{"inlineScript":null}}`), []byte(`{"triggerables":{"a:b:rawscript/1":{}}}`), true)
	f.Add([]byte(`{"runnables":{"r":{"type":"path","path":"hub/1"}}}`), []byte(`null`), false)
	f.Add([]byte(`{}`), []byte(`{"sandb\u006fx":false,"frontend_sdk_scopes":["*"]}`), true)
	f.Fuzz(func(t *testing.T, value, policy []byte, strip bool) {
		rep, err := WalkApp(value, policy, Limits{}, AppOptions{StripSDKReadScopes: strip})
		if err != nil {
			if ie := (*InputError)(nil); !errors.As(err, &ie) {
				t.Fatalf("error is %T, want *InputError: %v", err, err)
			}
			return
		}
		var vdoc, pdoc any
		if err := json.Unmarshal(value, &vdoc); err != nil {
			t.Fatalf("accepted a value encoding/json rejects: %v", err)
		}
		if t := bytes.TrimSpace(policy); len(t) == 0 {
			policy = []byte("{}")
		}
		if err := json.Unmarshal(policy, &pdoc); err != nil {
			t.Fatalf("accepted a policy encoding/json rejects: %v", err)
		}
		have := map[string]bool{}
		for _, v := range rep.Violations {
			var d any
			switch v.Doc {
			case DocAppValue:
				d = vdoc
			case DocAppPolicy:
				d = pdoc
			default:
				t.Fatalf("violation in doc %q", v.Doc)
			}
			if _, ok := resolvePointer(d, v.Pointer.String()); !ok {
				t.Fatalf("%s pointer %q does not resolve", v.Doc, v.Pointer.String())
			}
			have[string(v.Reason)+" "+string(v.Doc)+" "+v.Pointer.String()] = true
		}
		for _, r := range rep.ValuePaths {
			if _, ok := resolvePointer(vdoc, r.Pointer.String()); !ok {
				t.Fatalf("value path pointer %q does not resolve", r.Pointer.String())
			}
		}
		for _, r := range rep.PolicyPaths {
			if _, ok := resolvePointer(pdoc, r.Pointer.String()); !ok {
				t.Fatalf("policy path pointer %q does not resolve", r.Pointer.String())
			}
		}
		eachObject(vdoc, "", func(ptr string, obj map[string]any) {
			if _, ok := obj["inlineScript"]; ok && !have["INLINE_CODE app_value "+ptr+"/inlineScript"] {
				t.Fatalf("inlineScript at %q not refused", ptr)
			}
			_, lang := obj["language"]
			if (obj["content"] != nil || obj["code"] != nil) && lang && !have["INLINE_CODE app_value "+ptr] {
				t.Fatalf("content next to language at %q not refused", ptr)
			}
		})
		if pm, ok := pdoc.(map[string]any); ok {
			if pm["execution_mode"] == "viewer" && !have["VIEWER_MODE app_policy /execution_mode"] {
				t.Fatal("viewer mode not refused")
			}
			for _, name := range []string{"triggerables", "triggerables_v2"} {
				m, _ := pm[name].(map[string]any)
				for k := range m {
					if (strings.HasPrefix(k, "rawscript/") || strings.Contains(k, ":rawscript/")) &&
						!have["RAWSCRIPT_KEY app_policy /"+name+"/"+escapePointerToken(k)] {
						t.Fatalf("rawscript key %q not refused", k)
					}
				}
			}
		}
		var norm map[string]any
		if err := json.Unmarshal(rep.NormalizedPolicy, &norm); err != nil {
			t.Fatalf("normalized policy is not JSON: %v: %s", err, rep.NormalizedPolicy)
		}
		if norm["sandbox"] != true {
			t.Fatalf("sandbox not forced: %s", rep.NormalizedPolicy)
		}
	})
}

// FuzzParseDoc is differential: the package's reader may refuse more than encoding/json (NUL,
// lone surrogates, duplicates, depth), never less, and never reads a different value.
func FuzzParseDoc(f *testing.F) {
	for _, s := range []string{`{}`, `[1,"a",null,true,{"b":[]}]`, `"\ud83d\ude00"`, `-1.5e-3`, `{"a":1,"a":2}`, "\"\\u0000\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := parseDoc(raw, DocFlow, DefaultLimits())
		if err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			t.Fatalf("accepted input that encoding/json rejects: %v", err)
		}
		if _, err := dec.Token(); err == nil {
			t.Fatal("accepted trailing data")
		}
		got, _ := json.Marshal(toAny(d, root))
		want, _ := json.Marshal(v)
		if !bytes.Equal(got, want) {
			t.Fatalf("value differs:\n got %s\nwant %s", got, want)
		}
		var buf bytes.Buffer
		buf.Write(d.writeRaw(nil, root))
		var back any
		if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatalf("writeRaw produced invalid JSON %q: %v", buf.String(), err)
		}
	})
}

// eachObject visits every object of a generic document with its RFC 6901 pointer.
func eachObject(v any, ptr string, fn func(string, map[string]any)) {
	switch c := v.(type) {
	case map[string]any:
		fn(ptr, c)
		for k, x := range c {
			eachObject(x, ptr+"/"+escapePointerToken(k), fn)
		}
	case []any:
		for i, x := range c {
			eachObject(x, ptr+"/"+strconv.Itoa(i), fn)
		}
	}
}
