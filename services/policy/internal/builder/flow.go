package builder

import (
	"fmt"
	"strings"
)

// FlowReport is the outcome of WalkFlow. Violations refuse an operator's write or preview;
// the references are returned for every caller, operator or not, because a value-only walk
// cannot authorize them: the service checks each against the caller's own permissions.
type FlowReport struct {
	Violations []Violation   // structural walk order, then anything the whole-document sweep found
	Tags       []TagRef      // script.tag_override, rawscript/flowscript/aiagent tag, in walk order
	Runnables  []RunnableRef // every script/flow step and flowmodule agent tool, in walk order
	Pins       []PinRef      // every script step carrying a hash, in walk order
	// ViolationsOmitted counts the violations past Limits.MaxFindings: found, refusing, not listed.
	ViolationsOmitted int

	d *doc // the document the pointers read; see Release
}

// Release returns the document's buffers for reuse. Pointers render "" afterwards, so render
// what the answer needs first. Not calling it only costs the reuse.
func (r *FlowReport) Release() {
	if r.d != nil {
		r.d.release()
		r.d = nil
	}
}

// Composable reports whether the value is composition only. The references still have to be
// authorized before the write is allowed.
func (r FlowReport) Composable() bool { return len(r.Violations) == 0 && r.ViolationsOmitted == 0 }

// DistinctPaths returns Runnables with duplicate (kind, path) pairs removed, first one kept.
func (r FlowReport) DistinctPaths() []RunnableRef { return DistinctRunnables(r.Runnables) }

// DistinctTags returns the distinct tags in first-seen order.
func (r FlowReport) DistinctTags() []string {
	seen := make(map[string]struct{}, len(r.Tags))
	var out []string
	for _, t := range r.Tags {
		if _, ok := seen[t.Tag]; !ok {
			seen[t.Tag] = struct{}{}
			out = append(out, t.Tag)
		}
	}
	return out
}

// WalkFlow checks a flow exactly as the platform sends it. raw is either a FlowValue
// ({"modules": [...], ...}) or an object carrying one under "value" (NewFlow / EditFlow with
// its schema, a preview request) or "flow_value" (a flow dependencies request). The form is
// chosen by which of those keys the top-level object has; more than one is refused as
// ambiguous. Pointers are relative to raw as passed, so in the carrying form they start with
// /value. The carrying object's own "tag" (the whole flow's worker tag) is reported with the
// step tags.
//
// The walk follows the platform's own structure (modules, preprocessor_module, failure_module,
// loops, branches, agent tools). A second pass then sweeps the whole document, including fields
// the walk does not interpret, for shapes that carry code (a rawscript or flowscript object, a
// populated modules_node/default_node, a schema dropdown script), so that a field the walk does
// not know can never hide code from it.
func WalkFlow(raw []byte, lim Limits) (FlowReport, error) {
	lim = lim.resolved()
	d, err := parseDoc(raw, DocFlow, lim)
	if err != nil {
		return FlowReport{}, err
	}
	return walkFlowDoc(d, lim)
}

// WalkFlowString is WalkFlow over a string (a request's flow_json field), without copying it.
func WalkFlowString(src string, lim Limits) (FlowReport, error) {
	lim = lim.resolved()
	d, err := parseDocString(src, DocFlow, lim)
	if err != nil {
		return FlowReport{}, err
	}
	return walkFlowDoc(d, lim)
}

func walkFlowDoc(d *doc, lim Limits) (FlowReport, error) {
	w := &flowWalker{d: d, lim: lim, refs: refCounter{lim: lim}, found: findings{max: lim.MaxFindings},
		reported: make([]uint64, len(d.nodes)/64+1)}
	if err := w.walkTop(); err != nil {
		d.release()
		return FlowReport{}, err
	}
	w.sweep(root)
	w.rep.Violations, w.rep.ViolationsOmitted = w.found.list, w.found.omitted
	w.rep.d = d
	return w.rep, nil
}

type flowWalker struct {
	d        *doc
	lim      Limits
	rep      FlowReport
	found    findings
	refs     refCounter
	modules  int
	reported []uint64 // nodes a violation already points at, so the sweep does not repeat it
}

// at is the pointer to node n, extended by key when key is not empty.
func (w *flowWalker) at(n int32, key string) Pointer {
	return Pointer{d: w.d, n: n, key: key, max: w.lim.MaxPointerBytes}
}

func (w *flowWalker) inputErr(n int32, key, rule string) error {
	return &InputError{Doc: DocFlow, Pointer: w.at(n, key).String(), Rule: rule}
}

func (w *flowWalker) limitErr(n int32, rule string) error {
	return &InputError{Doc: DocFlow, Pointer: w.at(n, "").String(), Rule: rule, Limit: true}
}

// violate records a finding at node n (extended by key).
func (w *flowWalker) violate(r Reason, n int32, key string, msg string) {
	w.found.add(Violation{Reason: r, Doc: DocFlow, Pointer: w.at(n, key), Message: msg})
	w.reported[n/64] |= 1 << (n % 64)
}

func (w *flowWalker) isReported(node int32) bool { return w.reported[node/64]&(1<<(node%64)) != 0 }

func (w *flowWalker) walkTop() error {
	d := w.d
	if d.kindOf(root) != kObject {
		return w.inputErr(root, "", "a flow must be a JSON object")
	}
	// Which form: a FlowValue has modules; a flow carrying one has value (NewFlow, a preview
	// request) or flow_value (a flow dependencies request). More than one is ambiguous.
	flow := root
	var forms []member
	for _, k := range []string{"modules", "value", "flow_value"} {
		if m, ok := d.member(root, k); ok {
			forms = append(forms, m)
		}
	}
	switch {
	case len(forms) == 0:
		return w.inputErr(root, "modules", "a flow value needs a modules array")
	case len(forms) > 1:
		return w.inputErr(forms[1].val, "", "a flow object has exactly one of modules (a flow value), value or flow_value (a flow carrying one)")
	case !d.keyIs(forms[0], "modules"):
		vm := forms[0]
		if d.kindOf(vm.val) != kObject {
			return w.inputErr(vm.val, "", "the flow value must be a JSON object")
		}
		// The carrying object's own tag routes the whole flow onto a worker group.
		var top fields
		collect(d, root, &top)
		if err := w.tag(&top, fTag); err != nil {
			return err
		}
		flow = vm.val
	}
	mm, ok := d.member(flow, "modules")
	if !ok {
		return w.inputErr(flow, "modules", "a flow value needs a modules array")
	}
	if err := w.walkModuleList(mm.val, 1); err != nil {
		return err
	}
	// Same order as the platform's check: modules, then preprocessor, then failure module.
	for _, slot := range []string{"preprocessor_module", "failure_module"} {
		m, ok := d.member(flow, slot)
		if !ok || d.isNull(m.val) {
			continue
		}
		if err := w.walkModule(m.val, 1); err != nil {
			return err
		}
	}
	return nil
}

func (w *flowWalker) walkModuleList(arr int32, depth int) error {
	if w.d.kindOf(arr) != kArray {
		return w.inputErr(arr, "", "must be an array of flow modules")
	}
	for _, m := range w.d.elems(arr) {
		if err := w.walkModule(m.val, depth); err != nil {
			return err
		}
	}
	return nil
}

// enterModule counts a module or agent tool against the limits.
func (w *flowWalker) enterModule(n int32, depth int) error {
	if depth > w.lim.MaxModuleDepth {
		return w.limitErr(n, fmt.Sprintf("modules nest deeper than %d levels", w.lim.MaxModuleDepth))
	}
	w.modules++
	if w.modules > w.lim.MaxModules {
		return w.limitErr(n, fmt.Sprintf("a flow may hold at most %d modules and agent tools", w.lim.MaxModules))
	}
	return nil
}

func (w *flowWalker) walkModule(m int32, depth int) error {
	if err := w.enterModule(m, depth); err != nil {
		return err
	}
	if w.d.kindOf(m) != kObject {
		return w.inputErr(m, "", "a flow module must be an object")
	}
	vm, ok := w.d.member(m, "value")
	if !ok {
		return w.inputErr(m, "value", "a flow module needs a value")
	}
	if w.d.kindOf(vm.val) != kObject {
		return w.inputErr(vm.val, "", "a flow module value must be an object")
	}
	return w.walkValue(vm.val, depth)
}

// Fields of a FlowModuleValue (or a tool value) that the walk reads, collected in one pass over
// the object's members.
const (
	fType = iota
	fPath
	fHash
	fTagOverride
	fTag
	fModules
	fDefault
	fBranches
	fTools
	fAgent
	fModulesNode
	fDefaultNode
	fToolType
	fInputTransforms
	fIterator
	nFields
)

// fieldNames is keyed by the constants, so an order changed in one place cannot give a field
// another's name (collect looks keys up here).
var fieldNames = [nFields]string{
	fType: "type", fPath: "path", fHash: "hash", fTagOverride: "tag_override", fTag: "tag",
	fModules: "modules", fDefault: "default", fBranches: "branches", fTools: "tools",
	fAgent: "agent", fModulesNode: "modules_node", fDefaultNode: "default_node",
	fToolType: "tool_type", fInputTransforms: "input_transforms", fIterator: "iterator",
}

// fieldsByFirst indexes fieldNames by their first byte: collect rejects most keys of a step
// (id, summary...) by one array lookup, without a string comparison, and compares the others
// with at most five names.
var fieldsByFirst = func() (t [256][]uint8) {
	for i, n := range fieldNames {
		t[n[0]] = append(t[n[0]], uint8(i))
	}
	return t
}()

type fields struct {
	m  [nFields]member
	ok [nFields]bool
}

func (f *fields) has(i int) bool { return f.ok[i] }

func collect(d *doc, obj int32, f *fields) {
	for _, m := range d.elems(obj) {
		k := d.src[m.ka:m.kb]
		if m.kesc {
			k = d.key(m)
		}
		if k == "" {
			continue
		}
		for _, i := range fieldsByFirst[k[0]] {
			if fieldNames[i] == k {
				f.m[i], f.ok[i] = m, true
				break
			}
		}
	}
}

// nonNull reports whether field i is present with a non-null value, the way the platform's
// Option fields read it.
func (w *flowWalker) nonNull(f *fields, i int) (int32, bool) {
	if !f.ok[i] || w.d.isNull(f.m[i].val) {
		return 0, false
	}
	return f.m[i].val, true
}

// walkValue checks one FlowModuleValue (a module's value, or an agent tool's value).
func (w *flowWalker) walkValue(v int32, depth int) error {
	var f fields
	collect(w.d, v, &f)
	return w.walkFields(v, &f, depth)
}

func (w *flowWalker) walkFields(v int32, f *fields, depth int) error {
	d := w.d
	// A node id names code hoisted into a flow_node row, i.e. stored under some other flow. The
	// platform only reads it on loops and branches, but an authored value has no business
	// carrying one anywhere, so it is refused whatever the type.
	for _, i := range []int{fModulesNode, fDefaultNode} {
		if n, ok := w.nonNull(f, i); ok {
			w.violate(ReasonNodeReference, n, "", "references code stored outside the flow (a "+fieldNames[i]+" hoisted by the dependency job)")
		}
	}
	tv, ok := w.nonNull(f, fType)
	if !ok {
		w.violate(ReasonUnknownModuleType, v, "", "module value has no type")
		return nil
	}
	if d.kindOf(tv) != kString {
		w.violate(ReasonUnknownModuleType, tv, "", "module type is not a string")
		return nil
	}
	w.inputTransforms(f)
	switch t := d.str(tv); t {
	case "script":
		return w.runnable(v, f, KindScript)
	case "flow":
		return w.runnable(v, f, KindFlow)
	case "forloopflow", "whileloopflow":
		if it, ok := w.nonNull(f, fIterator); ok {
			w.transform(it)
		}
		return w.childModules(v, f, fModules, depth)
	case "branchone":
		// The platform walks default before branches; keep its order.
		if err := w.childModules(v, f, fDefault, depth); err != nil {
			return err
		}
		return w.branches(v, f, depth)
	case "branchall":
		return w.branches(v, f, depth)
	case "rawscript":
		w.violate(ReasonInlineCode, v, "", "step has inline code")
		return w.tag(f, fTag)
	case "flowscript":
		w.violate(ReasonNodeReference, v, "", "step references code stored outside the flow (flowscript)")
		return w.tag(f, fTag)
	case "identity":
		return nil
	case "aiagent":
		return w.agent(v, f, depth)
	default:
		w.violate(ReasonUnknownModuleType, tv, "", fmt.Sprintf("unknown module type %q", t))
		return nil
	}
}

// inputTransforms checks that every input transform of a step is one the platform defines
// (static, javascript, ai). Their content is data or an expression, not code the walk refuses,
// but a transform type nobody knows may be read by a later platform as something that is.
func (w *flowWalker) inputTransforms(f *fields) {
	it, ok := w.nonNull(f, fInputTransforms)
	if !ok {
		return
	}
	if w.d.kindOf(it) != kObject {
		w.violate(ReasonUnknownShape, it, "", "input_transforms must be an object of input transforms")
		return
	}
	for _, m := range w.d.elems(it) {
		w.transform(m.val)
	}
}

func (w *flowWalker) transform(n int32) {
	d := w.d
	if d.kindOf(n) != kObject {
		w.violate(ReasonUnknownShape, n, "", "an input transform must be an object with a type")
		return
	}
	t, ok := d.get(n, "type")
	if !ok || d.kindOf(t) != kString {
		w.violate(ReasonUnknownShape, n, "", "an input transform needs a type: static, javascript or ai")
		return
	}
	switch d.str(t) {
	case "static", "javascript", "ai":
	default:
		w.violate(ReasonUnknownShape, t, "", fmt.Sprintf("unknown input transform type %q (known: static, javascript, ai)", d.str(t)))
	}
}

func (w *flowWalker) runnable(v int32, f *fields, kind RunnableKind) error {
	d := w.d
	if !f.has(fPath) {
		return w.inputErr(v, "path", "a "+string(kind)+" step needs a path")
	}
	pv := f.m[fPath].val
	if d.kindOf(pv) != kString {
		return w.inputErr(pv, "", "path must be a string")
	}
	p := d.str(pv)
	here := w.at(v, "")
	if err := w.refs.add(DocFlow, w.at(pv, ""), "path", p); err != nil {
		return err
	}
	if strings.HasPrefix(p, "hub/") {
		w.violate(ReasonHubPath, pv, "", "hub runnables are not available to operators with builder rights; deploy it to the workspace first")
	}
	w.rep.Runnables = append(w.rep.Runnables, RunnableRef{Kind: kind, Path: p, Pointer: here})
	if kind != KindScript {
		return nil
	}
	if h, ok := w.nonNull(f, fHash); ok {
		if d.kindOf(h) != kString || !isScriptHash(d.str(h)) {
			return w.inputErr(v, "hash", "hash must be a script hash of 16 hex digits")
		}
		w.rep.Pins = append(w.rep.Pins, PinRef{Path: p, Hash: strings.ToLower(d.str(h)), Pointer: here})
	}
	return w.tag(f, fTagOverride)
}

func isScriptHash(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

func (w *flowWalker) tag(f *fields, i int) error {
	t, ok := w.nonNull(f, i)
	if !ok {
		return nil
	}
	key := fieldNames[i]
	if w.d.kindOf(t) != kString {
		return w.inputErr(t, "", key+" must be a string")
	}
	// An empty tag is no tag: the platform falls back to the default routing.
	if s := w.d.str(t); s != "" {
		if err := w.refs.add(DocFlow, w.at(t, ""), key, s); err != nil {
			return err
		}
		w.rep.Tags = append(w.rep.Tags, TagRef{Tag: s, Pointer: w.at(t, "")})
	}
	return nil
}

func (w *flowWalker) childModules(v int32, f *fields, i int, depth int) error {
	if !f.has(i) {
		return w.inputErr(v, fieldNames[i], "required")
	}
	return w.walkModuleList(f.m[i].val, depth+1)
}

func (w *flowWalker) branches(v int32, f *fields, depth int) error {
	d := w.d
	if !f.has(fBranches) {
		return w.inputErr(v, "branches", "required")
	}
	bs := f.m[fBranches].val
	if d.kindOf(bs) != kArray {
		return w.inputErr(bs, "", "branches must be an array")
	}
	for _, b := range d.elems(bs) {
		if d.kindOf(b.val) != kObject {
			return w.inputErr(b.val, "", "a branch must be an object")
		}
		var bf fields
		collect(d, b.val, &bf)
		if n, ok := w.nonNull(&bf, fModulesNode); ok {
			w.violate(ReasonNodeReference, n, "", "branch references code stored outside the flow (modules_node)")
		}
		if err := w.childModules(b.val, &bf, fModules, depth); err != nil {
			return err
		}
	}
	return nil
}

func (w *flowWalker) agent(v int32, f *fields, depth int) error {
	d := w.d
	// A linked agent resolves its tools from an ai_agent resource at run time, and operators may
	// write resources: the tool list is outside this check and can be swapped for a raw script
	// after the flow is approved. Anything but null or "" counts as a link.
	if a, ok := w.nonNull(f, fAgent); ok && (d.kindOf(a) != kString || d.str(a) != "") {
		w.violate(ReasonAgentLink, a, "", "links an AI agent resource, whose tools live outside the flow")
	}
	if err := w.tag(f, fTag); err != nil {
		return err
	}
	tools, ok := w.nonNull(f, fTools)
	if !ok {
		return nil // the platform defaults tools to empty
	}
	if d.kindOf(tools) != kArray {
		return w.inputErr(tools, "", "tools must be an array")
	}
	for _, t := range d.elems(tools) {
		if err := w.walkTool(t.val, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// walkTool checks one AgentTool. Its value is a ToolValue tagged by tool_type, and the
// platform's deserializer falls back to reading the whole object as a legacy FlowModuleValue
// whenever the tagged read fails (a tool_type it does not know, an mcp tool with a malformed
// field...). So any tool value that has a "type" is also walked as a module value: the walk must
// see whatever the fallback could run. A script or flow tool is a runnable like any step.
func (w *flowWalker) walkTool(t int32, depth int) error {
	d := w.d
	if err := w.enterModule(t, depth); err != nil {
		return err
	}
	if d.kindOf(t) != kObject {
		return w.inputErr(t, "", "an agent tool must be an object")
	}
	vm, ok := d.member(t, "value")
	if !ok {
		return w.inputErr(t, "value", "an agent tool needs a value")
	}
	tv := vm.val
	if d.kindOf(tv) != kObject {
		return w.inputErr(tv, "", "an agent tool value must be an object")
	}
	var f fields
	collect(d, tv, &f)
	_, hasType := w.nonNull(&f, fType)
	tt, ok := w.nonNull(&f, fToolType)
	isStr := ok && d.kindOf(tt) == kString
	switch {
	case !ok, isStr && d.str(tt) == "flowmodule":
		// Legacy tool (no tool_type) or a flowmodule tool: the value is a FlowModuleValue.
		return w.walkFields(tv, &f, depth)
	case isStr && (d.str(tt) == "mcp" || d.str(tt) == "websearch"):
		// No code of their own; only the fallback read could make one run a module.
		if hasType {
			return w.walkFields(tv, &f, depth)
		}
		return nil
	default:
		w.violate(ReasonUnknownModuleType, tt, "", "unknown agent tool type")
		if hasType {
			return w.walkFields(tv, &f, depth)
		}
		return nil
	}
}

// sweep visits every node of the document in order and refuses shapes that carry code wherever
// they sit, unless the structural walk already reported that very node. It covers fields the
// walk does not interpret (unknown keys, a future module slot, the schema next to the value).
// Its price is a false positive on static data that happens to look like code (a static input
// whose value is an object with "type":"rawscript"), which is refused rather than risked.
// An object's own findings come before its members'. Findings record nodes; nothing is
// rendered here.
func (w *flowWalker) sweep(i int32) {
	d := w.d
	switch d.kindOf(i) {
	case kArray:
		for _, m := range d.elems(i) {
			if k := d.kindOf(m.val); k == kArray || k == kObject {
				w.sweep(m.val)
			}
		}
	case kObject:
		special := false
		for _, m := range d.elems(i) {
			k := d.src[m.ka:m.kb]
			if m.kesc {
				k = d.key(m)
			}
			switch {
			case k == "type":
				if w.isReported(i) || d.kindOf(m.val) != kString {
					continue
				}
				switch d.str(m.val) {
				case "rawscript":
					w.violate(ReasonInlineCode, i, "", "inline code in a field the walk does not interpret")
				case "flowscript":
					w.violate(ReasonNodeReference, i, "", "flowscript in a field the walk does not interpret")
				}
			case k == "modules_node" || k == "default_node" || isDynCodeKey(k):
				special = true
			}
		}
		if special {
			for _, m := range d.elems(i) {
				if d.isNull(m.val) || w.isReported(m.val) {
					continue
				}
				switch k := d.key(m); {
				case k == "modules_node" || k == "default_node":
					w.violate(ReasonNodeReference, m.val, "", "references code stored outside the flow ("+k+")")
				case isDynCodeKey(k):
					w.violate(ReasonInlineCode, m.val, "", "a schema dropdown script ("+k+") is code the caller authors")
				}
			}
		}
		for _, m := range d.elems(i) {
			if k := d.kindOf(m.val); k == kArray || k == kObject {
				w.sweep(m.val)
			}
		}
	default: // scalars are never code
	}
}

// isDynCodeKey matches x-windmill-dyn-select-code and any sibling of the same family
// (x-windmill-dyn-<something>-code), since each is a script the platform runs to fill a form.
func isDynCodeKey(k string) bool {
	return k == "x-windmill-dyn-select-code" ||
		(strings.HasPrefix(k, "x-windmill-dyn-") && strings.HasSuffix(k, "-code"))
}
