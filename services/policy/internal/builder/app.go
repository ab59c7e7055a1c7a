package builder

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// AppOptions tune the normalized policy.
type AppOptions struct {
	// StripSDKReadScopes removes variables:read and resources:read (and any scope that would
	// cover them: a path-suffixed form, "variables:*", "resources:*", "*") from
	// frontend_sdk_scopes. The spec accepts the risk of a builder raw app minting a viewer-
	// identity token within the curated scopes and names this as the lever if it is revisited.
	StripSDKReadScopes bool
}

// AppKind is which editor produced an app value, as far as its top-level keys tell.
type AppKind string

const (
	AppRaw     AppKind = "raw"     // full-code app: files / runnables (multipart bundle)
	AppLowCode AppKind = "lowcode" // grid / subgrids / hiddenInlineScripts
	AppUnknown AppKind = "unknown" // neither, or both
)

// AppReport is the outcome of WalkApp.
type AppReport struct {
	// Violations: policy findings first (execution_mode, triggerables, triggerables_v2), then
	// value findings in document order. Doc says which document each pointer is in.
	Violations []Violation
	// PolicyPaths are the script/<path> and flow/<path> triggerables (after any "<component>:"
	// prefix). Pointers are into the policy.
	PolicyPaths []RunnableRef
	// ValuePaths are the runnableByPath entries of the value, which is what the deployed bundle
	// resolves a runnable_id against and sends. Pointers are into the value. The two surfaces
	// are not the same list and the caller must authorize both.
	ValuePaths []RunnableRef
	// ExecutionMode as the platform will read it: "publisher" when omitted.
	ExecutionMode string
	Kind          AppKind
	// NormalizedPolicy is the policy with sandbox forced to true (and SDK read scopes removed
	// when asked). It is always computed; the caller stores it for an operator-authored app.
	NormalizedPolicy []byte
	// ViolationsOmitted counts the violations past Limits.MaxFindings: found, refusing, not listed.
	ViolationsOmitted int

	docs [2]*doc // policy and value, which the pointers read; see Release
}

// Composable reports whether the app passed every value-only rule. Both path surfaces still
// have to be authorized.
func (r AppReport) Composable() bool { return len(r.Violations) == 0 && r.ViolationsOmitted == 0 }

// WalkApp checks an app value and its policy as the platform sends them. An empty or null
// policy is read as {} (the platform's defaults: publisher mode, no triggerables).
//
// Inline code in the value is found structurally, never by asking whether a language parses
// (the platform's traverse_app_inline_scripts skips a script whose language does not parse, and
// the author picks the fields). Over the whole value tree, at any depth:
//
//  1. any object with an "inlineScript" key, whatever it holds (what the platform's own
//     app_value_has_inline_script refuses; an inlineScript may also carry only an app_script
//     id whose code is stored elsewhere);
//  2. any object with a non-null "content" or "code" next to a "language" key, or whose type
//     is "runnableByName" or "inline", or that is an entry of a runnables, hiddenInlineScripts,
//     unusedInlineScripts, inlineScripts or backgroundScripts container.
//
// Frontend scripts (language "frontend") count: they run in each viewer's browser.
// Expressions (eval, evalv2, template inputs) do not, like JavaScript expressions in flows.
func WalkApp(value []byte, policy []byte, lim Limits, opts AppOptions) (AppReport, error) {
	lim = lim.resolved()
	if t := bytes.TrimSpace(policy); len(t) == 0 || string(t) == "null" {
		policy = []byte("{}")
	}
	pd, err := parseDoc(policy, DocAppPolicy, lim)
	if err != nil {
		return AppReport{}, err
	}
	if pd.kindOf(root) != kObject {
		pd.release()
		return AppReport{}, &InputError{Doc: DocAppPolicy, Rule: "an app policy must be a JSON object"}
	}
	vd, err := parseDoc(value, DocAppValue, lim)
	if err != nil {
		pd.release()
		return AppReport{}, err
	}
	fail := func(err error) (AppReport, error) {
		pd.release()
		vd.release()
		return AppReport{}, err
	}
	if vd.kindOf(root) != kObject {
		return fail(&InputError{Doc: DocAppValue, Rule: "an app value must be a JSON object"})
	}
	var rep AppReport
	found := findings{max: lim.MaxFindings}
	refs := refCounter{lim: lim}
	if err := checkPolicy(pd, lim, &rep, &found, &refs); err != nil {
		return fail(err)
	}
	aw := &appWalker{d: vd, lim: lim, rep: &rep, found: &found, refs: &refs, reported: make([]uint64, len(vd.nodes)/64+1)}
	if err := aw.walk(root, false, false, false); err != nil {
		return fail(err)
	}
	rep.Violations, rep.ViolationsOmitted = found.list, found.omitted
	rep.Kind = appKind(vd)
	if rep.NormalizedPolicy, err = normalizePolicy(pd, opts, rep.ExecutionMode); err != nil {
		return fail(err)
	}
	rep.docs = [2]*doc{pd, vd}
	return rep, nil
}

// Release returns both documents' buffers for reuse; see FlowReport.Release.
func (r *AppReport) Release() {
	for i, d := range r.docs {
		if d != nil {
			d.release()
			r.docs[i] = nil
		}
	}
}

func checkPolicy(d *doc, lim Limits, rep *AppReport, found *findings, refs *refCounter) error {
	at := func(n int32) Pointer { return Pointer{d: d, n: n, max: lim.MaxPointerBytes} }
	rep.ExecutionMode = "publisher"
	if m, ok := d.getNonNull(root, "execution_mode"); ok {
		mode, isStr := "", d.kindOf(m) == kString
		if isStr {
			mode = d.str(m)
		}
		switch mode {
		case "viewer":
			// Viewer mode falls back to a default triggerable for any path: the policy stops being
			// the list of what the app may invoke, and the job runs as whoever opened the app.
			found.add(Violation{
				Reason: ReasonViewerMode, Doc: DocAppPolicy, Pointer: at(m),
				Message: "viewer execution mode is refused for a builder app: it lets the app run any runnable as the viewer",
			})
		case "publisher", "anonymous":
			// The spec names exactly these three modes; anything else (a "guest" mode, another
			// spelling) is a mode nobody checked, and the platform's reading of it is unknown.
		default:
			return &InputError{Doc: DocAppPolicy, Pointer: "/execution_mode", Rule: "must be one of publisher, viewer, anonymous"}
		}
		rep.ExecutionMode = mode
	}
	// Legacy triggerables are converted to triggerables_v2 at read time, so both authorize.
	for _, mapName := range []string{"triggerables", "triggerables_v2"} {
		t, ok := d.getNonNull(root, mapName)
		if !ok {
			continue
		}
		if d.kindOf(t) != kObject {
			return &InputError{Doc: DocAppPolicy, Pointer: "/" + mapName, Rule: "must be an object keyed by triggerable"}
		}
		for _, m := range d.elems(t) {
			if err := checkTriggerableKey(d.key(m), at(m.val), rep, found, refs); err != nil {
				return err
			}
		}
	}
	if s, ok := d.getNonNull(root, "frontend_sdk_scopes"); ok {
		if d.kindOf(s) != kArray {
			return &InputError{Doc: DocAppPolicy, Pointer: "/frontend_sdk_scopes", Rule: "must be an array of scope strings"}
		}
		for i, m := range d.elems(s) {
			if d.kindOf(m.val) != kString {
				return &InputError{Doc: DocAppPolicy, Pointer: fmt.Sprintf("/frontend_sdk_scopes/%d", i), Rule: "must be a scope string"}
			}
		}
	}
	return nil
}

// keyReading is what a triggerable key (or a preview path) can resolve to.
type keyReading struct {
	ref       RunnableRef // the one workspace runnable it can name, if hasRef
	hasRef    bool
	rawscript bool // some reading is rawscript/<sha>
	hub       bool // some reading is a hub runnable (hubscript/..., script/hub/..., flow/hub/...)
	colon     bool // some script/flow reading has a ':' in its path
	known     bool // some reading has a known prefix
}

// readKey reads a key the way execute_component's lookup can match it. Keys are
// "<prefix>/<path>" optionally behind "<component>:"; the component string is unrestricted, so
// "a:b:script/x" still resolves "script/x". Every suffix after any ':' (and the whole key) is
// therefore a candidate. Runnable paths never contain ':' (the catalog refuses it), so only the
// reading after the last ':' can name a workspace runnable; a script/ or flow/ reading earlier
// in the key has a ':' in its path and can be authorized against nothing, so it is reported
// rather than looked up. That also keeps the cost linear: one reference per key, not one per
// ':' with the rest of the key as its path.
func readKey(key string) keyReading {
	var r keyReading
	last := strings.LastIndexByte(key, ':')
	for i := -1; i < len(key); i++ {
		if i >= 0 && key[i] != ':' {
			continue
		}
		c := key[i+1:]
		var kind RunnableKind
		var p string
		switch {
		case strings.HasPrefix(c, "rawscript/"):
			r.rawscript, r.known = true, true
			continue
		case strings.HasPrefix(c, "hubscript/"):
			r.hub, r.known = true, true
			continue
		case strings.HasPrefix(c, "script/"):
			kind, p = KindScript, c[len("script/"):]
		case strings.HasPrefix(c, "flow/"):
			kind, p = KindFlow, c[len("flow/"):]
		default:
			continue
		}
		r.known = true
		if strings.HasPrefix(p, "hub/") {
			r.hub = true
		}
		if i != last {
			r.colon = true
			continue
		}
		r.ref, r.hasRef = RunnableRef{Kind: kind, Path: p}, true
	}
	return r
}

// checkTriggerableKey refuses every key it cannot read as a workspace runnable the caller can
// be authorized against: rawscript (caller-supplied code), hub runnables (hubscript/ as
// CheckPreview reads it, or a hub/ path), a path with ':' in it, and any prefix it does not know.
func checkTriggerableKey(key string, at Pointer, rep *AppReport, found *findings, refs *refCounter) error {
	if err := refs.add(DocAppPolicy, at, "triggerable key", key); err != nil {
		return err
	}
	r := readKey(key)
	if r.rawscript {
		// The key is the deployed app's authorization to run caller-supplied raw_code hashing to
		// it (run mode authorizes inline code by the policy alone): arbitrary code execution
		// behind a value that passed the inline-script check.
		found.add(Violation{Reason: ReasonRawscriptKey, Doc: DocAppPolicy, Pointer: at,
			Message: "a rawscript/<sha> triggerable authorizes running caller-supplied code"})
	}
	if r.hub {
		found.add(Violation{Reason: ReasonHubPath, Doc: DocAppPolicy, Pointer: at,
			Message: "hub runnables are not available to operators with builder rights; deploy it to the workspace first"})
	}
	switch {
	case !r.known:
		found.add(Violation{Reason: ReasonUnknownTriggerable, Doc: DocAppPolicy, Pointer: at,
			Message: "triggerable key has no known prefix (script/, flow/, hubscript/, rawscript/, optionally behind <component>:)"})
	case r.colon:
		found.add(Violation{Reason: ReasonUnknownTriggerable, Doc: DocAppPolicy, Pointer: at,
			Message: "triggerable key names a script/ or flow/ path containing ':', which no runnable path has"})
	}
	if r.hasRef {
		ref := r.ref
		ref.Pointer = at
		rep.PolicyPaths = append(rep.PolicyPaths, ref)
	}
	return nil
}

// appCodeContainers are the keys whose entries are runnables (maps or arrays of them). An entry
// there carrying content is inline code even without a language field.
var appCodeContainers = map[string]bool{
	"runnables":           true,
	"hiddenInlineScripts": true,
	"unusedInlineScripts": true,
	"inlineScripts":       true,
	"backgroundScripts":   true,
}

// entryTypes are the types a runnable (an entry of a code container, or a component's
// "runnable") may have: low-code runnableByPath / runnableByName, a raw app's path / inline, and
// the CLI file format's script / flow / hubscript. Any other type is refused: the walk decides
// code and paths by type, and a type it does not know may be either.
var entryTypes = map[string]bool{
	"runnableByPath": true, "runnableByName": true, "path": true, "inline": true,
	"script": true, "flow": true, "hubscript": true,
}

type appWalker struct {
	d        *doc
	lim      Limits
	rep      *AppReport
	found    *findings
	refs     *refCounter
	reported []uint64
}

func (w *appWalker) at(n int32) Pointer { return Pointer{d: w.d, n: n, max: w.lim.MaxPointerBytes} }

func (w *appWalker) violate(r Reason, node int32, msg string) {
	w.found.add(Violation{Reason: r, Doc: DocAppValue, Pointer: w.at(node), Message: msg})
	w.reported[node/64] |= 1 << (node % 64)
}

func (w *appWalker) isReported(node int32) bool { return w.reported[node/64]&(1<<(node%64)) != 0 }

// walk visits node i. isContainer: i is the value of an appCodeContainers key. isEntry: i is an
// element or member value of such a container. isRunnable: i is a component's "runnable".
func (w *appWalker) walk(i int32, isContainer, isEntry, isRunnable bool) error {
	d := w.d
	switch d.kindOf(i) {
	case kArray:
		for _, m := range d.elems(i) {
			if err := w.walk(m.val, false, isContainer, false); err != nil {
				return err
			}
		}
	case kObject:
		if err := w.object(i, isEntry, isRunnable); err != nil {
			return err
		}
		for _, m := range d.elems(i) {
			k := d.key(m)
			if err := w.walk(m.val, appCodeContainers[k], isContainer, k == "runnable"); err != nil {
				return err
			}
		}
	default: // scalars hold no runnable
	}
	return nil
}

func (w *appWalker) object(i int32, isEntry, isRunnable bool) error {
	d := w.d
	if m, ok := d.member(i, "inlineScript"); ok {
		w.violate(ReasonInlineCode, m.val, "inline script in the app value")
	}
	typ, _ := d.stringAt(i, "type")
	_, hasContent := d.getNonNull(i, "content")
	_, hasCode := d.getNonNull(i, "code")
	if !w.isReported(i) {
		_, hasLang := d.member(i, "language")
		if (hasContent || hasCode) && (hasLang || typ == "runnableByName" || typ == "inline" || isEntry) {
			w.violate(ReasonInlineCode, i, "inline code in the app value")
		}
	}
	if tn, ok := d.getNonNull(i, "type"); ok && (isEntry || isRunnable) && !entryTypes[typ] {
		w.found.add(Violation{Reason: ReasonUnknownShape, Doc: DocAppValue, Pointer: w.at(tn),
			Message: fmt.Sprintf("unknown runnable type %q (known: runnableByPath, runnableByName, path, inline, script, flow, hubscript)", typ)})
	}
	// A raw app's runnables use {type:"path", runType, path}; low-code uses runnableByPath. A
	// {type:"path"} elsewhere without runType is a theme reference, not a runnable. An entry of a
	// runnables container that names a path and carries no code (code is refused above) counts
	// whatever its type says (the CLI's file format writes {type:"script"|"flow"|"hubscript",
	// path}; another type is refused above and still reported): a shape the walk does not know
	// must not hide a path from it.
	_, hasRunType := d.getNonNull(i, "runType")
	pn, ok := d.getNonNull(i, "path")
	if !ok {
		return nil // nothing the bundle could resolve
	}
	if !(isEntry && !hasContent && !hasCode) && typ != "runnableByPath" && !(typ == "path" && (hasRunType || isEntry)) {
		return nil
	}
	if d.kindOf(pn) != kString {
		return &InputError{Doc: DocAppValue, Pointer: d.pointer(i, "path", w.lim.MaxPointerBytes), Rule: "path must be a string"}
	}
	p := d.str(pn)
	if err := w.refs.add(DocAppValue, w.at(pn), "path", p); err != nil {
		return err
	}
	kind, hubRun, hubNode := KindScript, false, pn
	switch typ {
	case "flow":
		kind = KindFlow
	case "hubscript":
		hubRun = true
		hubNode, _ = d.get(i, "type")
	}
	if rt, ok := d.getNonNull(i, "runType"); ok {
		s := ""
		if d.kindOf(rt) == kString {
			s = d.str(rt)
		}
		switch s {
		case "script":
			kind = KindScript
		case "hubscript":
			hubRun, hubNode = true, rt
		case "flow":
			kind = KindFlow
		default:
			return &InputError{Doc: DocAppValue, Pointer: d.pointer(rt, "", w.lim.MaxPointerBytes), Rule: "must be script, flow or hubscript"}
		}
	}
	switch {
	case strings.HasPrefix(p, "hub/"):
		w.violate(ReasonHubPath, pn, "hub runnables are not available to operators with builder rights; deploy it to the workspace first")
	case hubRun:
		w.violate(ReasonHubPath, hubNode, "hub runnables are not available to operators with builder rights; deploy it to the workspace first")
	}
	w.rep.ValuePaths = append(w.rep.ValuePaths, RunnableRef{Kind: kind, Path: p, Pointer: w.at(i)})
	return nil
}

func appKind(d *doc) AppKind {
	has := func(k string) bool { _, ok := d.member(root, k); return ok }
	t, _ := d.stringAt(root, "type")
	raw := has("files") || has("runnables") || has("inlineScripts") || t == "rawapp"
	low := has("grid") || has("subgrids") || has("hiddenInlineScripts")
	switch {
	case raw && !low:
		return AppRaw
	case low && !raw:
		return AppLowCode
	default:
		return AppUnknown
	}
}

// normalizePolicy rewrites the policy with sandbox forced to true: the sandbox is what makes it
// safe to publish a bundle nobody reviewed, since without it the bundle runs same-origin with
// each viewer's session. It also pins execution_mode to the mode that was checked: the platform
// keeps an update's omitted (or null) mode unchanged, so an operator updating an admin's
// viewer-mode app without naming a mode would otherwise leave it in viewer mode, past the
// viewer refusal. Every other member is copied as written, in order.
func normalizePolicy(d *doc, opts AppOptions, mode string) ([]byte, error) {
	buf := make([]byte, 0, len(d.src)+60)
	buf = append(buf, '{')
	sandbox, pinned := false, false
	for j, m := range d.elems(root) {
		if j > 0 {
			buf = append(buf, ',')
		}
		buf = d.writeKey(buf, m)
		switch k := d.key(m); {
		case k == "sandbox":
			buf = append(buf, "true"...)
			sandbox = true
		case k == "execution_mode":
			buf = strconv.AppendQuote(buf, mode)
			pinned = true
		case k == "frontend_sdk_scopes" && opts.StripSDKReadScopes && d.kindOf(m.val) == kArray:
			buf = append(buf, '[')
			n := 0
			for _, s := range d.elems(m.val) {
				if isSDKReadScope(d.str(s.val)) {
					continue
				}
				if n > 0 {
					buf = append(buf, ',')
				}
				buf = d.writeRaw(buf, s.val)
				n++
			}
			buf = append(buf, ']')
		default:
			buf = d.writeRaw(buf, m.val)
		}
	}
	for _, add := range []struct {
		done   bool
		member string
	}{{sandbox, `"sandbox":true`}, {pinned, `"execution_mode":` + strconv.Quote(mode)}} {
		if add.done {
			continue
		}
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = append(buf, add.member...)
	}
	return append(buf, '}'), nil
}

func isSDKReadScope(s string) bool {
	switch s {
	case "variables:read", "resources:read", "variables:*", "resources:*", "*":
		return true
	}
	return strings.HasPrefix(s, "variables:read:") || strings.HasPrefix(s, "resources:read:")
}
