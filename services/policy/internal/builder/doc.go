// Package builder is the pure domain of the operator-builder checks: given a flow, or an app
// value and policy, exactly as the platform sends them (raw JSON, never a re-modelled subset),
// it says whether an operator with builder rights may write or preview it, and returns what a
// value-only walk cannot authorize (runnable paths, worker tags, version pins, both app path
// surfaces) for the service to check under the caller's own permissions. Builder rights let an
// operator compose runnables that already exist; they do not make them authors, so anything
// that carries code is refused, and anything the walk cannot read with certainty (malformed,
// ambiguous, too large, unknown module type) is refused too: a wrong "yes" is the worst bug.
//
// Three rules exist because the obvious walk over modules misses them (spec: "Operator builder
// rights"). A flowscript step or a populated modules_node/default_node "name code hoisted into a
// flow_node row. Only the dependency job produces them, so an authored value carrying one names
// code stored under some other flow." An AI agent step's tools: "ToolValue::FlowModule wraps a
// whole FlowModuleValue, so a tool can be a raw script." And an agent link: "A linked agent
// resolves its tools from an ai_agent resource at run time, and operators may write resources,
// so the tool list is outside this check and can be swapped for a raw script after the flow is
// approved." On the app side the same reasoning refuses Viewer mode (it makes the policy stop
// bounding what the app may invoke) and rawscript/<sha> triggerables (they authorize
// caller-supplied raw code in run mode), and finds inline scripts structurally rather than by
// whether their language parses, because "the author picks the fields".
//
// Cost is linear in the document and bounded (issue 11): the parser keeps a parent link per
// node so walks record nodes and a JSON pointer (Pointer) is rendered only for what an answer
// returns; reports keep the first Limits.MaxFindings violations and count the rest; keys,
// paths and the number of references are bounded before anything is looked up. Closed sets
// (module, tool, input transform and app runnable types, triggerable prefixes, execution modes,
// preview forms) refuse what they do not know.
//
// Checker (check.go) is the whole verdict: the walk, then what only the workspace can answer
// (readable paths, allowed tags, known pins), read through the Store interface, and the split
// between operators, held to the walk, and authors, to whom its findings are reported. The
// package imports neither gRPC nor SQL; internal/api maps *InputError to InvalidArgument and
// *Refusal to PermissionDenied with each finding's Reason in ErrorInfo.
package builder
