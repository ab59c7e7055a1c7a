package builder

import "strings"

// DeployPath is how a raw app reaches the platform.
type DeployPath string

const (
	// DeployMultipart is create_app_raw / update_app_raw: the browser or CLI already built the
	// bundle and nothing server-side compiles anything. Builders use these.
	DeployMultipart DeployPath = "multipart"
	// DeploySource is create_app_raw_source / update_app_raw_source: a bundler runs over
	// caller-supplied files as a job on a worker, which is arbitrary code execution.
	DeploySource DeployPath = "source"
)

// ScopeAll is how a caller passes an unscoped credential (a session, a token without scopes)
// to CheckDeployPath. nil or empty scopes mean "no scopes", which fails closed.
const ScopeAll = "*"

// CheckDeployPath refuses the source deploy path to operators, builder rights or not: it costs
// builders nothing, because the browser and the CLI both bundle locally and deploy multipart.
// Everyone else needs jobs:run on top of apps:write for it, since it runs a job.
func CheckDeployPath(path DeployPath, isOperator bool, scopes []string) []Violation {
	switch path {
	case DeployMultipart:
		return nil
	case DeploySource:
	default:
		// An unknown path is treated as the dangerous one, for everyone.
		return []Violation{{Reason: ReasonSourceDeploy, Doc: DocRequest, Message: "unknown deploy path " + string(path)}}
	}
	if isOperator {
		return []Violation{{Reason: ReasonSourceDeploy, Doc: DocRequest,
			Message: "operators cannot deploy a raw app from sources (it runs a bundler job); bundle locally and deploy multipart"}}
	}
	var out []Violation
	for _, need := range []string{"jobs:run", "apps:write"} {
		if !hasScope(scopes, need) {
			out = append(out, Violation{Reason: ReasonMissingScope, Doc: DocRequest,
				Message: "deploying a raw app from sources requires the " + need + " scope"})
		}
	}
	return out
}

// hasScope accepts the exact scope or ScopeAll. Narrower forms (a path-suffixed scope) do not
// satisfy a whole-domain requirement, and no other wildcard spelling is guessed at.
func hasScope(scopes []string, need string) bool {
	for _, s := range scopes {
		if s == need || s == ScopeAll {
			return true
		}
	}
	return false
}

// CheckPreview covers execute_component's preview branch. For operators raw code is refused,
// and so is a hub path, because require_path_read_access_for_preview admits hub/ for everyone.
// path is the request's path ("script/<p>", "flow/<p>", "hubscript/<p>", possibly behind
// "<component>:"), or a bare runnable path (u/... or f/...); every form is checked. Any other
// form (an unknown prefix, a script/ or flow/ path with ':' in it) is refused for every caller:
// it is not something this check can authorize. rawscript/ is code, refused to operators.
func CheckPreview(path string, rawCode bool, isOperator bool) []Violation {
	var out []Violation
	if !rawCode {
		r := readKey(path)
		switch {
		case r.colon:
			out = append(out, Violation{Reason: ReasonUnknownTriggerable, Doc: DocRequest,
				Message: "the preview path names a script/ or flow/ path containing ':', which no runnable path has"})
		case !r.known && !isBarePath(path):
			out = append(out, Violation{Reason: ReasonUnknownTriggerable, Doc: DocRequest,
				Message: "the preview path has no known form (script/, flow/, hubscript/ behind an optional <component>:, or a bare u/ or f/ path)"})
		case r.rawscript && isOperator:
			out = append(out, Violation{Reason: ReasonInlineCode, Doc: DocRequest,
				Message: "operators cannot preview a rawscript/ path (caller-supplied code)"})
		}
	}
	if !isOperator {
		return out
	}
	if isHubRequestPath(path) {
		out = append([]Violation{{Reason: ReasonHubPath, Doc: DocRequest,
			Message: "operators cannot preview a hub runnable"}}, out...)
	}
	if rawCode {
		out = append(out, Violation{Reason: ReasonInlineCode, Doc: DocRequest,
			Message: "operators cannot preview caller-supplied code"})
	}
	return out
}

// isBarePath is a runnable path without a prefix: u/<owner>/... or f/<folder>/... (hub/ is
// refused as a hub path on its own).
func isBarePath(p string) bool {
	return strings.HasPrefix(p, "u/") || strings.HasPrefix(p, "f/") || strings.HasPrefix(p, "hub/")
}

// PreviewRefs are the workspace runnables a preview path can resolve to: the script/ or flow/
// reading after the last ':' (see readKey), or, for a bare path, the script or the flow of that
// path. Hub readings are returned with a hub/ path, for the caller to skip.
func PreviewRefs(p string) (cands []RunnableRef, bare bool) {
	r := readKey(p)
	if r.hasRef {
		cands = append(cands, r.ref)
	}
	if i := strings.LastIndexByte(p, ':'); strings.HasPrefix(p[i+1:], "hubscript/") {
		cands = append(cands, RunnableRef{Kind: KindScript, Path: "hub/" + p[i+1+len("hubscript/"):]})
	}
	if r.known || !isBarePath(p) {
		return cands, false // an unknown form has no candidates: CheckPreview refuses it
	}
	return []RunnableRef{{Kind: KindScript, Path: p}, {Kind: KindFlow, Path: p}}, true
}

func isHubRequestPath(p string) bool {
	for i := -1; i < len(p); i++ {
		if i >= 0 && p[i] != ':' {
			continue
		}
		c := p[i+1:]
		if strings.HasPrefix(c, "hubscript/") {
			return true
		}
		for _, prefix := range []string{"script/", "flow/"} {
			c = strings.TrimPrefix(c, prefix)
		}
		if strings.HasPrefix(c, "hub/") {
			return true
		}
	}
	return false
}
