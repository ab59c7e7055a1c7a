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
}

// Composable reports whether the value is composition only. The references still have to be
// authorized before the write is allowed.
func (r FlowReport) Composable() bool { return len(r.Violations) == 0 }

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
	defer d.release()
	w := &flowWalker{d: d, lim: lim, p: path{d: d}, reported: make([]uint64, len(d.nodes)/64+1)}
	if err := w.walkTop(); err != nil {
		return FlowReport{}, err
	}
	w.sweep(root, &lazyPath{d: d})
	return w.rep, nil
}

type flowWalker struct {
	d        *doc
	lim      Limits
	p        path
	rep      FlowReport
	modules  int
	reported []uint64 // nodes a violation already points at, so the sweep does not repeat it
}

func (w *flowWalker) inputErr(ptr, rule string) error {
	return &InputError{Doc: DocFlow, Pointer: ptr, Rule: rule}
}

func (w *flowWalker) limitErr(rule string) error {
	return &InputError{Doc: DocFlow, Pointer: w.p.String(), Rule: rule, Limit: true}
}

func (w *flowWalker) violate(r Reason, ptr string, node int32, msg string) {
	w.rep.Violations = append(w.rep.Violations, Violation{Reason: r, Doc: DocFlow, Pointer: ptr, Message: msg})
	w.reported[node/64] |= 1 << (node % 64)
}

func (w *flowWalker) isReported(node int32) bool { return w.reported[node/64]&(1<<(node%64)) != 0 }

func (w *flowWalker) walkTop() error {
	d := w.d
	if d.kindOf(root) != kObject {
		return w.inputErr("", "a flow must be a JSON object")
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
		return w.inputErr("/modules", "a flow value needs a modules array")
	case len(forms) > 1:
		return w.inputErr("/"+d.key(forms[1]), "a flow object has exactly one of modules (a flow value), value or flow_value (a flow carrying one)")
	case !d.keyIs(forms[0], "modules"):
		vm := forms[0]
		if d.kindOf(vm.val) != kObject {
			return w.inputErr("/"+d.key(vm), "the flow value must be a JSON object")
		}
		// The carrying object's own tag routes the whole flow onto a worker group.
		var top fields
		collect(d, root, &top)
		if err := w.tag(&top, fTag); err != nil {
			return err
		}
		flow = vm.val
		w.p.pushKey(vm)
	}
	mm, ok := d.member(flow, "modules")
	if !ok {
		return w.inputErr(w.p.with("modules"), "a flow value needs a modules array")
	}
	w.p.pushKey(mm)
	if err := w.walkModuleList(mm.val, 1); err != nil {
		return err
	}
	w.p.pop()
	// Same order as the platform's check: modules, then preprocessor, then failure module.
	for _, slot := range []string{"preprocessor_module", "failure_module"} {
		m, ok := d.member(flow, slot)
		if !ok || d.isNull(m.val) {
			continue
		}
		w.p.pushKey(m)
		if err := w.walkModule(m.val, 1); err != nil {
			return err
		}
		w.p.pop()
	}
	return nil
}

func (w *flowWalker) walkModuleList(arr int32, depth int) error {
	if w.d.kindOf(arr) != kArray {
		return w.inputErr(w.p.String(), "must be an array of flow modules")
	}
	for i, m := range w.d.elems(arr) {
		w.p.pushIdx(i)
		if err := w.walkModule(m.val, depth); err != nil {
			return err
		}
		w.p.pop()
	}
	return nil
}

// enterModule counts a module or agent tool against the limits.
func (w *flowWalker) enterModule(depth int) error {
	if depth > w.lim.MaxModuleDepth {
		return w.limitErr(fmt.Sprintf("modules nest deeper than %d levels", w.lim.MaxModuleDepth))
	}
	w.modules++
	if w.modules > w.lim.MaxModules {
		return w.limitErr(fmt.Sprintf("a flow may hold at most %d modules and agent tools", w.lim.MaxModules))
	}
	return nil
}

func (w *flowWalker) walkModule(m int32, depth int) error {
	if err := w.enterModule(depth); err != nil {
		return err
	}
	if w.d.kindOf(m) != kObject {
		return w.inputErr(w.p.String(), "a flow module must be an object")
	}
	vm, ok := w.d.member(m, "value")
	if !ok {
		return w.inputErr(w.p.with("value"), "a flow module needs a value")
	}
	w.p.pushKey(vm)
	defer w.p.pop()
	if w.d.kindOf(vm.val) != kObject {
		return w.inputErr(w.p.String(), "a flow module value must be an object")
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
	nFields
)

var fieldNames = [nFields]string{"type", "path", "hash", "tag_override", "tag", "modules", "default", "branches", "tools", "agent", "modules_node", "default_node", "tool_type"}

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
		i := -1
		// Dispatch on the first byte: most keys of a step (id, summary, input_transforms...) are
		// rejected by it without a string comparison.
		switch k[0] {
		case 't':
			switch k {
			case "type":
				i = fType
			case "tag":
				i = fTag
			case "tag_override":
				i = fTagOverride
			case "tools":
				i = fTools
			case "tool_type":
				i = fToolType
			}
		case 'p':
			if k == "path" {
				i = fPath
			}
		case 'h':
			if k == "hash" {
				i = fHash
			}
		case 'm':
			switch k {
			case "modules":
				i = fModules
			case "modules_node":
				i = fModulesNode
			}
		case 'd':
			switch k {
			case "default":
				i = fDefault
			case "default_node":
				i = fDefaultNode
			}
		case 'b':
			if k == "branches" {
				i = fBranches
			}
		case 'a':
			if k == "agent" {
				i = fAgent
			}
		}
		if i >= 0 {
			f.m[i], f.ok[i] = m, true
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
			w.violate(ReasonNodeReference, w.p.with(fieldNames[i]), n, "references code stored outside the flow (a "+fieldNames[i]+" hoisted by the dependency job)")
		}
	}
	tv, ok := w.nonNull(f, fType)
	if !ok {
		w.violate(ReasonUnknownModuleType, w.p.String(), v, "module value has no type")
		return nil
	}
	if d.kindOf(tv) != kString {
		w.violate(ReasonUnknownModuleType, w.p.with("type"), tv, "module type is not a string")
		return nil
	}
	switch t := d.str(tv); t {
	case "script":
		return w.runnable(f, KindScript)
	case "flow":
		return w.runnable(f, KindFlow)
	case "forloopflow", "whileloopflow":
		return w.childModules(f, fModules, depth)
	case "branchone":
		// The platform walks default before branches; keep its order.
		if err := w.childModules(f, fDefault, depth); err != nil {
			return err
		}
		return w.branches(f, depth)
	case "branchall":
		return w.branches(f, depth)
	case "rawscript":
		w.violate(ReasonInlineCode, w.p.String(), v, "step has inline code")
		return w.tag(f, fTag)
	case "flowscript":
		w.violate(ReasonNodeReference, w.p.String(), v, "step references code stored outside the flow (flowscript)")
		return w.tag(f, fTag)
	case "identity":
		return nil
	case "aiagent":
		return w.agent(f, depth)
	default:
		w.violate(ReasonUnknownModuleType, w.p.with("type"), tv, fmt.Sprintf("unknown module type %q", t))
		return nil
	}
}

func (w *flowWalker) runnable(f *fields, kind RunnableKind) error {
	d := w.d
	if !f.has(fPath) {
		return w.inputErr(w.p.with("path"), "a "+string(kind)+" step needs a path")
	}
	pv := f.m[fPath].val
	if d.kindOf(pv) != kString {
		return w.inputErr(w.p.with("path"), "path must be a string")
	}
	p := d.str(pv)
	if strings.HasPrefix(p, "hub/") {
		w.violate(ReasonHubPath, w.p.with("path"), pv, "hub runnables are not available to operators with builder rights; deploy it to the workspace first")
	}
	here := w.p.String()
	w.rep.Runnables = append(w.rep.Runnables, RunnableRef{Kind: kind, Path: p, Pointer: here})
	if kind != KindScript {
		return nil
	}
	if h, ok := w.nonNull(f, fHash); ok {
		if d.kindOf(h) != kString || !isScriptHash(d.str(h)) {
			return w.inputErr(w.p.with("hash"), "hash must be a script hash of 16 hex digits")
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
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
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
		return w.inputErr(w.p.with(key), key+" must be a string")
	}
	// An empty tag is no tag: the platform falls back to the default routing.
	if s := w.d.str(t); s != "" {
		w.rep.Tags = append(w.rep.Tags, TagRef{Tag: s, Pointer: w.p.with(key)})
	}
	return nil
}

func (w *flowWalker) childModules(f *fields, i int, depth int) error {
	if !f.has(i) {
		return w.inputErr(w.p.with(fieldNames[i]), "required")
	}
	w.p.pushKey(f.m[i])
	defer w.p.pop()
	return w.walkModuleList(f.m[i].val, depth+1)
}

func (w *flowWalker) branches(f *fields, depth int) error {
	d := w.d
	if !f.has(fBranches) {
		return w.inputErr(w.p.with("branches"), "required")
	}
	w.p.pushKey(f.m[fBranches])
	defer w.p.pop()
	bs := f.m[fBranches].val
	if d.kindOf(bs) != kArray {
		return w.inputErr(w.p.String(), "branches must be an array")
	}
	for i, b := range d.elems(bs) {
		w.p.pushIdx(i)
		if d.kindOf(b.val) != kObject {
			return w.inputErr(w.p.String(), "a branch must be an object")
		}
		var bf fields
		collect(d, b.val, &bf)
		if n, ok := w.nonNull(&bf, fModulesNode); ok {
			w.violate(ReasonNodeReference, w.p.with("modules_node"), n, "branch references code stored outside the flow (modules_node)")
		}
		if err := w.childModules(&bf, fModules, depth); err != nil {
			return err
		}
		w.p.pop()
	}
	return nil
}

func (w *flowWalker) agent(f *fields, depth int) error {
	d := w.d
	// A linked agent resolves its tools from an ai_agent resource at run time, and operators may
	// write resources: the tool list is outside this check and can be swapped for a raw script
	// after the flow is approved. Anything but null or "" counts as a link.
	if a, ok := w.nonNull(f, fAgent); ok && !(d.kindOf(a) == kString && d.str(a) == "") {
		w.violate(ReasonAgentLink, w.p.with("agent"), a, "links an AI agent resource, whose tools live outside the flow")
	}
	if err := w.tag(f, fTag); err != nil {
		return err
	}
	tools, ok := w.nonNull(f, fTools)
	if !ok {
		return nil // the platform defaults tools to empty
	}
	w.p.pushKey(f.m[fTools])
	defer w.p.pop()
	if d.kindOf(tools) != kArray {
		return w.inputErr(w.p.String(), "tools must be an array")
	}
	for i, t := range d.elems(tools) {
		w.p.pushIdx(i)
		if err := w.walkTool(t.val, depth+1); err != nil {
			return err
		}
		w.p.pop()
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
	if err := w.enterModule(depth); err != nil {
		return err
	}
	if d.kindOf(t) != kObject {
		return w.inputErr(w.p.String(), "an agent tool must be an object")
	}
	vm, ok := d.member(t, "value")
	if !ok {
		return w.inputErr(w.p.with("value"), "an agent tool needs a value")
	}
	w.p.pushKey(vm)
	defer w.p.pop()
	tv := vm.val
	if d.kindOf(tv) != kObject {
		return w.inputErr(w.p.String(), "an agent tool value must be an object")
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
		w.violate(ReasonUnknownModuleType, w.p.with("tool_type"), tt, "unknown agent tool type")
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
// An object's own findings come before its members'. The sweep touches every node, so it keeps
// its position as a lazy stack and renders a pointer only for a finding.
func (w *flowWalker) sweep(i int32, lp *lazyPath) {
	d := w.d
	switch d.kindOf(i) {
	case kArray:
		for j, m := range d.elems(i) {
			if k := d.kindOf(m.val); k == kArray || k == kObject {
				lp.pushIdx(j)
				w.sweep(m.val, lp)
				lp.pop()
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
					w.violate(ReasonInlineCode, lp.String(), i, "inline code in a field the walk does not interpret")
				case "flowscript":
					w.violate(ReasonNodeReference, lp.String(), i, "flowscript in a field the walk does not interpret")
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
					w.violate(ReasonNodeReference, lp.with(k), m.val, "references code stored outside the flow ("+k+")")
				case isDynCodeKey(k):
					w.violate(ReasonInlineCode, lp.with(k), m.val, "a schema dropdown script ("+k+") is code the caller authors")
				}
			}
		}
		for _, m := range d.elems(i) {
			if k := d.kindOf(m.val); k == kArray || k == kObject {
				lp.pushKey(m)
				w.sweep(m.val, lp)
				lp.pop()
			}
		}
	}
}

// isDynCodeKey matches x-windmill-dyn-select-code and any sibling of the same family
// (x-windmill-dyn-<something>-code), since each is a script the platform runs to fill a form.
func isDynCodeKey(k string) bool {
	return k == "x-windmill-dyn-select-code" ||
		(strings.HasPrefix(k, "x-windmill-dyn-") && strings.HasSuffix(k, "-code"))
}
