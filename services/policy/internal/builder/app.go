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
}

// Composable reports whether the app passed every value-only rule. Both path surfaces still
// have to be authorized.
func (r AppReport) Composable() bool { return len(r.Violations) == 0 }

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
	defer pd.release()
	if pd.kindOf(root) != kObject {
		return AppReport{}, &InputError{Doc: DocAppPolicy, Rule: "an app policy must be a JSON object"}
	}
	vd, err := parseDoc(value, DocAppValue, lim)
	if err != nil {
		return AppReport{}, err
	}
	defer vd.release()
	if vd.kindOf(root) != kObject {
		return AppReport{}, &InputError{Doc: DocAppValue, Rule: "an app value must be a JSON object"}
	}
	var rep AppReport
	if err := checkPolicy(pd, &rep); err != nil {
		return AppReport{}, err
	}
	aw := &appWalker{d: vd, p: path{d: vd}, rep: &rep, reported: make([]uint64, len(vd.nodes)/64+1)}
	if err := aw.walk(root, false, false); err != nil {
		return AppReport{}, err
	}
	rep.Kind = appKind(vd)
	if rep.NormalizedPolicy, err = normalizePolicy(pd, opts, rep.ExecutionMode); err != nil {
		return AppReport{}, err
	}
	return rep, nil
}

func checkPolicy(d *doc, rep *AppReport) error {
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
			rep.Violations = append(rep.Violations, Violation{
				Reason: ReasonViewerMode, Doc: DocAppPolicy, Pointer: "/execution_mode",
				Message: "viewer execution mode is refused for a builder app: it lets the app run any runnable as the viewer",
			})
		case "publisher", "anonymous", "guest":
		default:
			return &InputError{Doc: DocAppPolicy, Pointer: "/execution_mode", Rule: "must be one of publisher, viewer, anonymous, guest"}
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
			key := d.key(m)
			ptr := "/" + mapName + "/" + escapePointerToken(key)
			checkTriggerableKey(key, ptr, rep)
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

// checkTriggerableKey reads a key the way execute_component's lookup can match it. Keys are
// "<prefix>/<path>" optionally behind "<component>:"; the component string is unrestricted, so
// "a:b:script/x" still resolves "script/x". Every suffix after any ':' (and the whole key) is
// therefore a candidate.
func checkTriggerableKey(key, ptr string, rep *AppReport) {
	rawscript, hub := false, false
	for i := -1; i < len(key); i++ {
		if i >= 0 && key[i] != ':' {
			continue
		}
		c := key[i+1:]
		var kind RunnableKind
		var p string
		switch {
		case strings.HasPrefix(c, "rawscript/"):
			rawscript = true
			continue
		case strings.HasPrefix(c, "script/"):
			kind, p = KindScript, c[len("script/"):]
		case strings.HasPrefix(c, "flow/"):
			kind, p = KindFlow, c[len("flow/"):]
		default:
			continue
		}
		if strings.HasPrefix(p, "hub/") {
			hub = true
		}
		rep.PolicyPaths = append(rep.PolicyPaths, RunnableRef{Kind: kind, Path: p, Pointer: ptr})
	}
	if rawscript {
		// The key is the deployed app's authorization to run caller-supplied raw_code hashing to
		// it (run mode authorizes inline code by the policy alone): arbitrary code execution
		// behind a value that passed the inline-script check.
		rep.Violations = append(rep.Violations, Violation{
			Reason: ReasonRawscriptKey, Doc: DocAppPolicy, Pointer: ptr,
			Message: "a rawscript/<sha> triggerable authorizes running caller-supplied code",
		})
	}
	if hub {
		rep.Violations = append(rep.Violations, Violation{
			Reason: ReasonHubPath, Doc: DocAppPolicy, Pointer: ptr,
			Message: "hub runnables are not available to operators with builder rights; deploy it to the workspace first",
		})
	}
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

type appWalker struct {
	d        *doc
	p        path
	rep      *AppReport
	reported []uint64
}

func (w *appWalker) violate(r Reason, ptr string, node int32, msg string) {
	w.rep.Violations = append(w.rep.Violations, Violation{Reason: r, Doc: DocAppValue, Pointer: ptr, Message: msg})
	w.reported[node/64] |= 1 << (node % 64)
}

func (w *appWalker) isReported(node int32) bool { return w.reported[node/64]&(1<<(node%64)) != 0 }

// walk visits node i. isContainer: i is the value of an appCodeContainers key. isEntry: i is an
// element or member value of such a container.
func (w *appWalker) walk(i int32, isContainer, isEntry bool) error {
	d := w.d
	switch d.kindOf(i) {
	case kArray:
		for j, m := range d.elems(i) {
			w.p.pushIdx(j)
			if err := w.walk(m.val, false, isContainer); err != nil {
				return err
			}
			w.p.pop()
		}
	case kObject:
		if err := w.object(i, isEntry); err != nil {
			return err
		}
		for _, m := range d.elems(i) {
			w.p.pushKey(m)
			if err := w.walk(m.val, appCodeContainers[d.key(m)], isContainer); err != nil {
				return err
			}
			w.p.pop()
		}
	}
	return nil
}

func (w *appWalker) object(i int32, isEntry bool) error {
	d := w.d
	if m, ok := d.member(i, "inlineScript"); ok {
		w.violate(ReasonInlineCode, w.p.with("inlineScript"), m.val, "inline script in the app value")
	}
	typ, _ := d.stringAt(i, "type")
	_, hasContent := d.getNonNull(i, "content")
	_, hasCode := d.getNonNull(i, "code")
	if !w.isReported(i) {
		_, hasLang := d.member(i, "language")
		if (hasContent || hasCode) && (hasLang || typ == "runnableByName" || typ == "inline" || isEntry) {
			w.violate(ReasonInlineCode, w.p.String(), i, "inline code in the app value")
		}
	}
	// A raw app's runnables use {type:"path", runType, path}; low-code uses runnableByPath. A
	// {type:"path"} elsewhere without runType is a theme reference, not a runnable. An entry of a
	// runnables container that names a path and carries no code (code is refused above) counts
	// whatever its type says (the CLI's file format writes {type:"script"|"flow"|"hubscript",
	// path}): a shape the walk does not know must not hide a path from it.
	_, hasRunType := d.getNonNull(i, "runType")
	pn, ok := d.getNonNull(i, "path")
	if !ok {
		return nil // nothing the bundle could resolve
	}
	if !(isEntry && !hasContent && !hasCode) && typ != "runnableByPath" && !(typ == "path" && (hasRunType || isEntry)) {
		return nil
	}
	if d.kindOf(pn) != kString {
		return &InputError{Doc: DocAppValue, Pointer: w.p.with("path"), Rule: "path must be a string"}
	}
	p := d.str(pn)
	kind, hubRun, hubField := KindScript, false, "type"
	switch typ {
	case "flow":
		kind = KindFlow
	case "hubscript":
		hubRun = true
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
			hubRun, hubField = true, "runType"
		case "flow":
			kind = KindFlow
		default:
			return &InputError{Doc: DocAppValue, Pointer: w.p.with("runType"), Rule: "must be script, flow or hubscript"}
		}
	}
	switch {
	case strings.HasPrefix(p, "hub/"):
		w.violate(ReasonHubPath, w.p.with("path"), pn, "hub runnables are not available to operators with builder rights; deploy it to the workspace first")
	case hubRun:
		w.violate(ReasonHubPath, w.p.with(hubField), pn, "hub runnables are not available to operators with builder rights; deploy it to the workspace first")
	}
	w.rep.ValuePaths = append(w.rep.ValuePaths, RunnableRef{Kind: kind, Path: p, Pointer: w.p.String()})
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
