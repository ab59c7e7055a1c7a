package builder

import (
	"fmt"
	"strconv"

	"github.com/millwright/millwright/pkg/defaults"
)

// Reason names why a value is refused. The strings are part of the contract: they travel in
// google.rpc.ErrorInfo metadata and in the fixtures that other runners replay.
type Reason string

const (
	// ReasonInlineCode: the value carries code of its own (a rawscript step, an inline app
	// script, a schema dropdown script) or caller-supplied raw code in a preview.
	ReasonInlineCode Reason = "INLINE_CODE"
	// ReasonNodeReference: a flowscript step or a populated modules_node / default_node names
	// code hoisted into a flow_node row, i.e. code stored outside the value being checked.
	ReasonNodeReference Reason = "NODE_REFERENCE"
	// ReasonAgentLink: an AI agent step resolves its tools from an ai_agent resource at run time.
	ReasonAgentLink Reason = "AGENT_LINK"
	// ReasonHubPath: a hub runnable, which is not a workspace runnable the caller can be
	// authorized against.
	ReasonHubPath Reason = "HUB_PATH"
	// ReasonUnknownModuleType: a module type (or agent tool type) the walk does not know. It is
	// refused, never skipped, because an unknown shape may carry code the walk cannot see.
	ReasonUnknownModuleType Reason = "UNKNOWN_MODULE_TYPE"
	// ReasonViewerMode: an app in Viewer execution mode, where the policy stops bounding what
	// the app may invoke.
	ReasonViewerMode Reason = "VIEWER_MODE"
	// ReasonRawscriptKey: a rawscript/<sha> triggerable key, the deployed app's authorization
	// to run caller-supplied raw code.
	ReasonRawscriptKey Reason = "RAWSCRIPT_KEY"
	// ReasonSourceDeploy: the raw-app source deploy path, which runs a bundler on a worker.
	ReasonSourceDeploy Reason = "SOURCE_DEPLOY"
	// ReasonMissingScope: a required token scope is absent.
	ReasonMissingScope Reason = "MISSING_SCOPE"
	// ReasonUnknownTriggerable: an app policy triggerable key (or a preview path) whose prefix
	// the check does not know, or whose path can name no runnable: it is refused, never
	// skipped, because the platform may read it as something the check did not authorize.
	ReasonUnknownTriggerable Reason = "UNKNOWN_TRIGGERABLE"
	// ReasonUnknownShape: a value shape the check does not know where it knows the shapes (an
	// app runnable's type, a flow input transform's type): refused like an unknown module type.
	ReasonUnknownShape Reason = "UNKNOWN_SHAPE"
)

// Doc names the document a Violation or InputError pointer is relative to, because an app
// check reads two documents (value and policy) and their pointers would otherwise collide.
type Doc string

const (
	DocFlow      Doc = "flow"       // the bytes passed to WalkFlow
	DocAppValue  Doc = "app_value"  // the value bytes passed to WalkApp
	DocAppPolicy Doc = "app_policy" // the policy bytes passed to WalkApp
	DocRequest   Doc = "request"    // request fields (deploy path, preview), pointer is empty
)

// Violation is one refusal. Pointer is an RFC 6901 JSON pointer into Doc, to the offending
// value ("" is the whole document).
type Violation struct {
	Reason  Reason
	Doc     Doc
	Pointer Pointer
	Message string
}

// Pointer is an RFC 6901 pointer into a checked document, kept as the node it points at and
// rendered only by String: a walk may record a hundred thousand locations, and the answer
// renders only the few it returns. The zero Pointer is "" (the whole document, or a request
// field). A Pointer reads its document, so it must be rendered before the report is released.
type Pointer struct {
	d   *doc
	n   int32
	key string // a member of n that may not exist as a node, e.g. the "path" a step lacks
	max int
}

// String renders the pointer (at most Limits.MaxPointerBytes, cut back to an ancestor if longer;
// "" once the report is released).
func (p Pointer) String() string {
	if p.d == nil || p.d.nodes == nil {
		return ""
	}
	return p.d.pointer(p.n, p.key, p.max)
}

// InputError is input that is not a well-formed document of the expected shape, or that
// exceeds the limits. The api layer maps it to InvalidArgument naming Doc+Pointer and Rule.
// It is distinct from a Violation: the input could not be judged at all, so it is refused.
type InputError struct {
	Doc     Doc
	Pointer string
	Rule    string
	// Limit is set when the input was refused for exceeding Limits (size, nesting, module count)
	// rather than for its shape, so the api layer can say VALUE_TOO_LARGE.
	Limit bool
}

func (e *InputError) Error() string {
	if e.Pointer == "" {
		return fmt.Sprintf("%s: %s", e.Doc, e.Rule)
	}
	return fmt.Sprintf("%s %s: %s", e.Doc, e.Pointer, e.Rule)
}

// Limits bound the work one check may do. A zero field means its default, so Limits{} is the
// normal configuration.
type Limits struct {
	MaxBytes       int // size of one document in bytes; default 4 MiB
	MaxJSONDepth   int // nesting of arrays/objects; default 512
	MaxModuleDepth int // nesting of flow modules (loops, branches, agent tools); default 64
	MaxModules     int // flow modules plus agent tools in one flow; default 100,000
	// MaxKeyBytes bounds one JSON object key (raw bytes); default 4 KiB.
	MaxKeyBytes int
	// MaxRefBytes bounds a runnable path, a worker tag and a triggerable key; default 1 KiB
	// (catalog paths are at most 255 bytes, so nothing longer can be authorized anyway).
	MaxRefBytes int
	// MaxRefs bounds the references (runnables, pins, tags, triggerables, value paths) one
	// document may carry, counted as found, before any is hashed or looked up; default 20,000.
	MaxRefs int
	// MaxFindings bounds the violations a report keeps (the rest are counted); default 100.
	MaxFindings int
	// MaxPointerBytes bounds one rendered pointer (see Pointer); default 2 KiB.
	MaxPointerBytes int
}

const (
	defaultMaxBytes       = 4 << 20
	defaultMaxJSONDepth   = 512
	defaultMaxModuleDepth = 64
	defaultMaxModules     = 100_000
	defaultMaxKeyBytes    = 4 << 10
	defaultMaxRefBytes    = 1 << 10
	defaultMaxRefs        = 20_000
	defaultMaxFindings    = 100
	defaultMaxPointer     = 2048

	// Hard ceilings, whatever the configuration says: spans are int32 and the parser recurses
	// once per nesting level, so both must stay bounded for any input.
	hardMaxBytes     = 1 << 30
	hardMaxJSONDepth = 10_000
)

// DefaultLimits returns the limits a zero Limits resolves to.
func DefaultLimits() Limits { return Limits{}.resolved() }

func (l Limits) resolved() Limits {
	l.MaxBytes = min(defaults.Positive(l.MaxBytes, defaultMaxBytes), hardMaxBytes)
	l.MaxJSONDepth = min(defaults.Positive(l.MaxJSONDepth, defaultMaxJSONDepth), hardMaxJSONDepth)
	l.MaxModuleDepth = defaults.Positive(l.MaxModuleDepth, defaultMaxModuleDepth)
	l.MaxModules = defaults.Positive(l.MaxModules, defaultMaxModules)
	l.MaxKeyBytes = defaults.Positive(l.MaxKeyBytes, defaultMaxKeyBytes)
	l.MaxRefBytes = defaults.Positive(l.MaxRefBytes, defaultMaxRefBytes)
	l.MaxRefs = defaults.Positive(l.MaxRefs, defaultMaxRefs)
	l.MaxFindings = defaults.Positive(l.MaxFindings, defaultMaxFindings)
	l.MaxPointerBytes = defaults.Positive(l.MaxPointerBytes, defaultMaxPointer)
	return l
}

// RunnableKind is what a reference points at.
type RunnableKind string

const (
	KindScript RunnableKind = "script"
	KindFlow   RunnableKind = "flow"
)

// RunnableRef is a workspace runnable the value references. The platform resolves it with the
// root DB handle and runs it as its own on_behalf_of, so the caller must re-read Path under the
// caller's RLS: composing a path is enough to run it.
type RunnableRef struct {
	Kind    RunnableKind
	Path    string
	Pointer Pointer // the step / runnable object (flows, app value) or the triggerable key (policy)
}

// TagRef is a worker tag a step pins. A tag routes the job onto a worker group, possibly a
// privileged one, so the caller must check the tag is available to it.
type TagRef struct {
	Tag     string
	Pointer Pointer // the tag string itself
}

// PinRef is a version-pinned script step. The platform dispatches it by Hash alone and never
// consults Path, so the caller must verify the pair: Hash is a version of Path, readable by
// the caller.
type PinRef struct {
	Path    string
	Hash    string  // 16 lowercase hex digits, as the platform prints a ScriptHash
	Pointer Pointer // the step object
}

// Int64 is the hash as the platform stores it (script.hash is a bigint holding the 64 bits).
func (p PinRef) Int64() int64 {
	u, err := strconv.ParseUint(p.Hash, 16, 64)
	if err != nil {
		// Hash is validated when the PinRef is built; a bad one here is a programming error,
		// and 0 is never a real script hash, so it cannot authorize anything.
		return 0
	}
	return int64(u)
}

// DistinctRunnables returns refs with duplicate (Kind, Path) pairs removed, keeping the first
// occurrence (and so its pointer) in order. The caller checks each distinct pair once.
func DistinctRunnables(refs []RunnableRef) []RunnableRef {
	type key struct {
		k RunnableKind
		p string
	}
	seen := make(map[key]struct{}, len(refs))
	out := make([]RunnableRef, 0, len(refs))
	for _, r := range refs {
		k := key{r.Kind, r.Path}
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, r)
	}
	return out
}

// findings collects violations up to a cap and counts the rest, so a document with a million
// findings costs a counter, not a million messages.
type findings struct {
	max     int
	list    []Violation
	omitted int
}

func (f *findings) add(v Violation) {
	if len(f.list) < f.max {
		f.list = append(f.list, v)
		return
	}
	f.omitted++
}

// refCounter refuses a document carrying more references than Limits.MaxRefs, and references
// longer than Limits.MaxRefBytes, as they are found: before any is hashed or looked up.
type refCounter struct {
	n   int
	lim Limits
}

func (c *refCounter) add(doc Doc, at Pointer, what string, s string) error {
	if len(s) > c.lim.MaxRefBytes {
		return &InputError{Doc: doc, Pointer: at.String(), Rule: fmt.Sprintf("%s is %d bytes, the limit is %d", what, len(s), c.lim.MaxRefBytes), Limit: true}
	}
	c.n++
	if c.n > c.lim.MaxRefs {
		return &InputError{Doc: doc, Pointer: at.String(), Rule: fmt.Sprintf("more than %d references (runnables, pins, tags, triggerables) in one document", c.lim.MaxRefs), Limit: true}
	}
	return nil
}
