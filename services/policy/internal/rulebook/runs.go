package rulebook

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Origin is how a run started.
type Origin string

// Origins.
const (
	OriginAppSession   Origin = "app_session"
	OriginAppAnonymous Origin = "app_anonymous"
	OriginDirect       Origin = "direct"
	OriginPreview      Origin = "preview"
	OriginJobToken     Origin = "job_token"
	OriginSchedule     Origin = "schedule"
	OriginTrigger      Origin = "trigger"
	OriginAITool       Origin = "ai_tool"
)

// ViewerSource is where a run's viewer comes from. It is decided by the origin alone; no
// request field names the viewer.
type ViewerSource int

const (
	// ViewerNone: the run has no viewer (and takes no credential).
	ViewerNone ViewerSource = iota + 1
	// ViewerUser: the viewer is the member a user token authenticates.
	ViewerUser
	// ViewerParent: the viewer is the recorded viewer of the run a job token is bound to.
	ViewerParent
)

var viewerSources = map[Origin]ViewerSource{
	OriginAppSession:   ViewerUser,
	OriginDirect:       ViewerUser,
	OriginPreview:      ViewerUser,
	OriginJobToken:     ViewerParent,
	OriginAppAnonymous: ViewerNone,
	OriginSchedule:     ViewerNone,
	OriginTrigger:      ViewerNone,
	OriginAITool:       ViewerNone,
}

// Origins lists every origin.
func Origins() []Origin {
	out := make([]Origin, 0, len(viewerSources))
	for o := range viewerSources {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// ViewerSourceOf returns where o's viewer comes from; false for an unknown origin.
func ViewerSourceOf(o Origin) (ViewerSource, bool) {
	s, ok := viewerSources[o]
	return s, ok
}

// Runnable is what a cached computation ran: a script hash or a path (exactly one).
type Runnable struct {
	Hash string
	Path string
}

// cacheKeyVersion is hashed first, so a change of the encoding below changes every key
// instead of silently aliasing old ones.
const cacheKeyVersion = "millwright/result-cache/v2"

// ResultCacheKey is the result-cache key of a run: sha256 over the run's workspace, the job
// kind, the runnable, the args sorted by name (each value in canonical JSON) and the run's
// recorded viewer, as 64 hex. Every field is length-prefixed, so no two different inputs share
// an encoding. Runs with no viewer (viewer nil) share one key per computation; a run with a
// viewer never shares a key with another viewer or with the no-viewer runs (spec: a cached
// result belongs to one viewer). The workspace is hashed in too, so that the key alone never
// names another workspace's result, even where results were stored in one shared place.
func ResultCacheKey(workspace, kind string, r Runnable, argsJSON []byte, viewer *string) (string, error) {
	if (r.Hash == "") == (r.Path == "") {
		return "", errors.New("exactly one of hash and path is required")
	}
	args, err := CanonicalArgs(argsJSON)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	field := func(b []byte) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	field([]byte(cacheKeyVersion))
	field([]byte(workspace))
	field([]byte(kind))
	if r.Hash != "" {
		field([]byte("hash"))
		field([]byte(r.Hash))
	} else {
		field([]byte("path"))
		field([]byte(r.Path))
	}
	field(fmt.Appendf(nil, "%d", len(args)))
	for _, a := range args {
		field([]byte(a.Name))
		field(a.Value)
	}
	if viewer == nil {
		field([]byte("no-viewer"))
	} else {
		field([]byte("viewer"))
		field([]byte(*viewer))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Arg is one argument in canonical form.
type Arg struct {
	Name  string
	Value []byte // canonical JSON
}

// CanonicalArgs parses a JSON object of args and returns them sorted by name with each value in
// canonical JSON (object keys sorted at every depth, no insignificant whitespace, numbers kept
// as written so no precision is lost). Empty input means no args. Duplicate keys are refused:
// two parsers could disagree on which one wins, and the key must describe what runs.
func CanonicalArgs(in []byte) ([]Arg, error) {
	if len(bytes.TrimSpace(in)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	v, err := decodeStrict(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("args: trailing data after the object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("args: not a JSON object")
	}
	out := make([]Arg, 0, len(obj))
	for k, val := range obj {
		var buf bytes.Buffer
		encodeCanonical(&buf, val)
		out = append(out, Arg{Name: k, Value: buf.Bytes()})
	}
	slices.SortFunc(out, func(a, b Arg) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

const maxArgsDepth = 64

func decodeStrict(dec *json.Decoder, depth int) (any, error) {
	if depth > maxArgsDepth {
		return nil, errors.New("args: nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("args: %w", err)
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("args: object key is not a string")
				}
				if _, dup := obj[k]; dup {
					return nil, fmt.Errorf("args: duplicate key %q", k)
				}
				v, err := decodeStrict(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("args: %w", err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeStrict(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("args: %w", err)
			}
			return arr, nil
		}
		return nil, errors.New("args: unexpected delimiter")
	default:
		return t, nil // string, json.Number, bool, nil
	}
}

// writeSeq writes open, the n items separated by commas, then end: an object's members and an
// array's elements alike.
func writeSeq(buf *bytes.Buffer, open, end byte, n int, item func(i int)) {
	buf.WriteByte(open)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		item(i)
	}
	buf.WriteByte(end)
}

func encodeCanonical(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		writeSeq(buf, '{', '}', len(keys), func(i int) {
			writeString(buf, keys[i])
			buf.WriteByte(':')
			encodeCanonical(buf, t[keys[i]])
		})
	case []any:
		writeSeq(buf, '[', ']', len(t), func(i int) { encodeCanonical(buf, t[i]) })
	case string:
		writeString(buf, t)
	case json.Number:
		buf.WriteString(t.String())
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	default:
		buf.WriteString("null")
	}
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // never fails for a string; escaping is deterministic
	buf.Write(b)
}
