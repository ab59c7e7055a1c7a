package builder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// This file is the builder verdict: the walk's report, plus what only the workspace can
// answer (is each referenced path readable by the caller, is each worker tag available to
// them, is each pinned hash a version of its path), turned into one answer: allowed, or refused
// with every finding. It reads the workspace through Store only, so it is tested with a fake
// (check_test.go); internal/api translates requests and answers and maps the errors.

// Reasons found by the workspace reads rather than by the walk.
const (
	// ReasonPathNotReadable: a referenced runnable is not readable by the caller (or does not
	// exist): composing a path is enough to run it, so the caller must be able to read it.
	ReasonPathNotReadable Reason = "PATH_NOT_READABLE"
	// ReasonTagNotAllowed: a pinned worker tag is not available to the caller.
	ReasonTagNotAllowed Reason = "TAG_NOT_ALLOWED"
	// ReasonHashMismatch: a pinned hash is not a version of the path beside it in this
	// workspace (the platform dispatches by the hash alone).
	ReasonHashMismatch Reason = "HASH_MISMATCH"
)

// MaxFindings bounds the findings one answer lists (stated in builder.proto); the rest are
// counted in Findings.Omitted and refuse all the same.
const MaxFindings = 100

// Store is what a check reads from the workspace. Every read is one statement or transaction
// whatever the number of references: the checker passes each distinct reference once.
type Store interface {
	// ReadablePaths returns the refs readable by caller (under the caller's row-level security).
	ReadablePaths(ctx context.Context, caller, workspace string, refs []rulebook.Ref) (map[rulebook.Ref]struct{}, error)
	// PinnedVersions returns the pins whose hash is a version of their path in workspace.
	PinnedVersions(ctx context.Context, workspace string, pins []rulebook.Pin) (map[rulebook.Pin]struct{}, error)
	// WorkerTags returns the workspace's worker tag rules.
	WorkerTags(ctx context.Context, workspace string) ([]rulebook.TagRule, error)
}

// Checker decides builder checks over a workspace.
type Checker struct {
	Store  Store
	Limits Limits
}

// HeldToWalk reports whether a role is held to the walk's verdict: operators, and any role that
// is not admin or developer (fail closed). Admins and developers are authors: the walk's
// findings are reported to them as code findings, not refusals; their references are still
// checked.
func HeldToWalk(r rulebook.Role) bool { return r != rulebook.RoleAdmin && r != rulebook.RoleDeveloper }

// Finding is one reason a check refuses (or, for authors, reports). Pointer is rendered.
type Finding struct {
	Reason   Reason
	Doc      Doc
	Pointer  string
	Message  string
	Metadata map[string]string // e.g. kind and path of an unreadable reference
}

// Findings keeps the first MaxFindings findings and counts the rest: a check over 20,000
// unreadable references builds a hundred findings, not 20,000.
type Findings struct {
	List    []Finding
	Omitted int
}

// add appends the finding mk builds, or only counts it when the list is full, so that a
// pointer is rendered only for a finding that is listed.
func (l *Findings) add(mk func() Finding) {
	if len(l.List) >= MaxFindings {
		l.Omitted++
		return
	}
	l.List = append(l.List, mk())
}

func (l *Findings) extend(o Findings) {
	for _, f := range o.List {
		l.add(func() Finding { return f })
	}
	l.Omitted += o.Omitted
}

// Empty reports no finding at all, listed or counted.
func (l Findings) Empty() bool { return len(l.List) == 0 && l.Omitted == 0 }

// Total counts every finding, listed or not.
func (l Findings) Total() int { return len(l.List) + l.Omitted }

func fromViolations(vs []Violation, omitted int) Findings {
	var l Findings
	for _, v := range vs {
		l.add(func() Finding {
			return Finding{Reason: v.Reason, Doc: v.Doc, Pointer: v.Pointer.String(), Message: v.Message}
		})
	}
	l.Omitted += omitted
	return l
}

// Refusal is a check refused by its findings. What is "flow", "app" or "preview".
type Refusal struct {
	What     string
	Findings Findings
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s refused: %d violation(s)", r.What, r.Findings.Total())
}

// FlowResult is an allowed flow: the walk's report (its references, listed by the answer) and,
// for an author, the value-only findings that would refuse an operator.
type FlowResult struct {
	Report FlowReport
	Code   Findings
}

// Release releases the report's document once the answer is rendered.
func (r *FlowResult) Release() { r.Report.Release() }

// CheckFlow checks a flow for the member t. It returns *InputError for a document the walk
// cannot judge, *Refusal when a finding refuses it, any other error when the workspace could
// not be read (never a yes).
func (c *Checker) CheckFlow(ctx context.Context, t rulebook.Tenancy, flowJSON string) (*FlowResult, error) {
	// The string form: the 2 MB field is parsed in place rather than copied to []byte and back.
	rep, err := WalkFlowString(flowJSON, c.Limits)
	if err != nil {
		return nil, err
	}
	var refused, code Findings
	if HeldToWalk(t.Role) {
		refused = fromViolations(rep.Violations, rep.ViolationsOmitted)
	} else {
		code = fromViolations(rep.Violations, rep.ViolationsOmitted)
	}

	// The three workspace reads (tags, paths, pins) read independent things, each in its own
	// statement or transaction; they run concurrently to overlap their round trips (~20 ms in
	// sequence on a 10,000-step flow). Findings and errors are combined in the sequential order
	// (tags, then paths, then pins), so the answer does not depend on the interleaving.
	var (
		wg                      sync.WaitGroup
		tagFs, unread, pinFs    Findings
		tagErr, readErr, pinErr error
	)
	wg.Add(3)
	go func() { defer wg.Done(); tagFs, tagErr = c.checkTags(ctx, t, rep.Tags) }()
	go func() {
		defer wg.Done()
		// Every runnable (pinned steps included) re-read under the caller's RLS, one query.
		unread, readErr = c.checkReadable(ctx, t, surface{DocFlow, rep.Runnables})
	}()
	go func() { defer wg.Done(); pinFs, pinErr = c.checkPins(ctx, t, rep.Pins) }()
	wg.Wait()
	for _, err := range []error{tagErr, readErr, pinErr} {
		if err != nil {
			rep.Release()
			return nil, err
		}
	}
	refused.extend(tagFs)
	refused.extend(unread)
	refused.extend(pinFs)
	if !refused.Empty() {
		rep.Release()
		return nil, &Refusal{What: "flow", Findings: refused}
	}
	return &FlowResult{Report: rep, Code: code}, nil
}

// AppRequest is an app check's input.
type AppRequest struct {
	Value, Policy string
	Deploy        DeployPath
	// Scopes of the credential the platform authenticated for the member (see CheckDeployPath).
	Scopes []string
}

// AppResult is an allowed app: the report (both path surfaces), the authors' code findings,
// and the policy the platform stores.
type AppResult struct {
	Report AppReport
	Code   Findings
	// NormalizedPolicy is what the platform stores: the walk's normalized policy for an
	// operator-authored app, the policy as sent (empty or null read as {}) otherwise.
	NormalizedPolicy string
}

// Release releases the report's documents once the answer is rendered.
func (r *AppResult) Release() { r.Report.Release() }

// CheckApp checks an app for the member t under the workspace's operator settings st. Errors
// as CheckFlow.
func (c *Checker) CheckApp(ctx context.Context, t rulebook.Tenancy, st rulebook.OperatorSettings, req AppRequest) (*AppResult, error) {
	held := HeldToWalk(t.Role)
	rep, err := WalkApp([]byte(req.Value), []byte(req.Policy), c.Limits, AppOptions{StripSDKReadScopes: held && st.StripBuilderSDKReadScopes})
	if err != nil {
		return nil, err
	}
	var refused, code Findings
	if held {
		refused = fromViolations(rep.Violations, rep.ViolationsOmitted)
	} else {
		code = fromViolations(rep.Violations, rep.ViolationsOmitted)
	}
	refused.extend(fromViolations(CheckDeployPath(req.Deploy, held, req.Scopes), 0))
	// Two surfaces, not one list: the policy's triggerables and the value's runnableByPath.
	unread, err := c.checkReadable(ctx, t, surface{DocAppPolicy, rep.PolicyPaths}, surface{DocAppValue, rep.ValuePaths})
	if err != nil {
		rep.Release()
		return nil, err
	}
	refused.extend(unread)
	if !refused.Empty() {
		rep.Release()
		return nil, &Refusal{What: "app", Findings: refused}
	}
	normalized := string(rep.NormalizedPolicy)
	if !held {
		// Not a builder app: the platform stores the policy as sent.
		normalized = req.Policy
		if s := strings.TrimSpace(normalized); s == "" || s == "null" {
			normalized = "{}"
		}
	}
	return &AppResult{Report: rep, Code: code, NormalizedPolicy: normalized}, nil
}

// CheckPreview checks a preview of path (rawCode: caller-supplied code instead of a path) for
// the member t and returns the workspace runnables the path resolves to that t can read.
// Errors as CheckFlow.
func (c *Checker) CheckPreview(ctx context.Context, t rulebook.Tenancy, path string, rawCode bool) ([]RunnableRef, error) {
	refused := fromViolations(CheckPreview(path, rawCode, HeldToWalk(t.Role)), 0)
	var readable []RunnableRef
	if !rawCode {
		// One reading per path (PreviewRefs): the path is at most 1 KiB (validator), and only
		// the reading after the last ':' can name a runnable.
		cands, bare := PreviewRefs(path)
		var ws []RunnableRef
		for _, r := range cands {
			if !isHub(r.Path) {
				ws = append(ws, r)
			}
		}
		unread, err := c.checkReadable(ctx, t, surface{DocRequest, ws})
		if err != nil {
			return nil, err
		}
		bad := map[RunnableRef]bool{}
		for _, u := range unread.List {
			bad[RunnableRef{Kind: RunnableKind(u.Metadata["kind"]), Path: u.Metadata["path"]}] = true
		}
		for _, r := range ws {
			if !bad[RunnableRef{Kind: r.Kind, Path: r.Path}] {
				readable = append(readable, RunnableRef{Kind: r.Kind, Path: r.Path})
			}
		}
		switch {
		case bare && len(ws) == 2 && len(unread.List) == 2:
			// A bare path resolves to the script or the flow of that path: neither is readable.
			u := unread.List[0]
			p := u.Metadata["path"]
			u.Metadata = map[string]string{"kind": "script or flow", "path": p}
			u.Message = fmt.Sprintf("no script or flow %s is readable by %s", p, t.Username)
			refused.add(func() Finding { return u })
		case !bare:
			refused.extend(unread)
		}
	}
	if !refused.Empty() {
		return nil, &Refusal{What: "preview", Findings: refused}
	}
	return readable, nil
}

func isHub(p string) bool { return strings.HasPrefix(p, "hub/") }

func catalogRef(k RunnableKind, p string) rulebook.Ref {
	if k == KindFlow {
		return rulebook.Ref{Kind: rulebook.KindFlow, Path: p}
	}
	return rulebook.Ref{Kind: rulebook.KindScript, Path: p}
}

// surface is one list of runnable references and the document its pointers are into.
type surface struct {
	doc  Doc
	refs []RunnableRef
}

// checkReadable re-reads every referenced workspace path under the caller's RLS, in one query
// for all distinct paths of all surfaces, and returns a PATH_NOT_READABLE per unreadable
// reference. Hub paths are not looked up: the walk refuses them for operators, and they are
// not workspace runnables for anyone else. The walk has already bounded the references in
// number (Limits.MaxRefs) and length (MaxRefBytes), so this work is linear.
func (c *Checker) checkReadable(ctx context.Context, t rulebook.Tenancy, surfaces ...surface) (Findings, error) {
	seen := map[rulebook.Ref]struct{}{}
	var refs []rulebook.Ref
	for _, s := range surfaces {
		for _, r := range s.refs {
			if isHub(r.Path) {
				continue
			}
			ref := catalogRef(r.Kind, r.Path)
			if _, ok := seen[ref]; !ok {
				seen[ref] = struct{}{}
				refs = append(refs, ref)
			}
		}
	}
	if len(refs) == 0 {
		return Findings{}, nil
	}
	ok, err := c.Store.ReadablePaths(ctx, t.Username, t.Workspace, refs)
	if err != nil {
		return Findings{}, err
	}
	var out Findings
	for _, s := range surfaces {
		for _, r := range s.refs {
			if isHub(r.Path) {
				continue
			}
			if _, yes := ok[catalogRef(r.Kind, r.Path)]; !yes {
				out.add(func() Finding {
					return Finding{Reason: ReasonPathNotReadable, Doc: s.doc, Pointer: r.Pointer.String(),
						Message:  fmt.Sprintf("%s %s is not readable by %s (or does not exist)", r.Kind, r.Path, t.Username),
						Metadata: map[string]string{"kind": string(r.Kind), "path": r.Path}}
				})
			}
		}
	}
	return out, nil
}

// checkTags reads the workspace's tag rules once, decides each distinct tag once and reports
// every refused tag.
func (c *Checker) checkTags(ctx context.Context, t rulebook.Tenancy, tags []TagRef) (Findings, error) {
	var out Findings
	if len(tags) == 0 {
		return out, nil
	}
	rules, err := c.Store.WorkerTags(ctx, t.Workspace)
	if err != nil {
		return out, err
	}
	verdict := map[string]error{}
	for _, tag := range tags {
		e, done := verdict[tag.Tag]
		if !done {
			e = rulebook.CheckTags(rules, t.Role, []string{tag.Tag})
			verdict[tag.Tag] = e
		}
		if e != nil {
			out.add(func() Finding {
				rule := "unknown"
				te := &rulebook.TagError{}
				if errors.As(e, &te) {
					rule = te.Reason
				}
				return Finding{Reason: ReasonTagNotAllowed, Doc: DocFlow, Pointer: tag.Pointer.String(), Message: e.Error(),
					Metadata: map[string]string{"tag": tag.Tag, "rule": rule}}
			})
		}
	}
	return out, nil
}

// checkPins: a step carrying a hash is dispatched by the hash alone, so the hash must be a
// version of the path beside it, in this workspace. One query for every distinct pair.
func (c *Checker) checkPins(ctx context.Context, t rulebook.Tenancy, pinRefs []PinRef) (Findings, error) {
	var out Findings
	var pins []rulebook.Pin
	seen := map[rulebook.Pin]struct{}{}
	for _, p := range pinRefs {
		pin := rulebook.Pin{Path: p.Path, Hash: p.Hash}
		if _, ok := seen[pin]; !ok && !isHub(p.Path) {
			seen[pin] = struct{}{}
			pins = append(pins, pin)
		}
	}
	if len(pins) == 0 {
		return out, nil
	}
	found, err := c.Store.PinnedVersions(ctx, t.Workspace, pins)
	if err != nil {
		return out, err
	}
	for _, p := range pinRefs {
		if isHub(p.Path) {
			continue
		}
		if _, ok := found[rulebook.Pin{Path: p.Path, Hash: p.Hash}]; !ok {
			out.add(func() Finding {
				return Finding{Reason: ReasonHashMismatch, Doc: DocFlow, Pointer: p.Pointer.String() + "/hash",
					Message:  fmt.Sprintf("hash %s is not a version of script %s in this workspace", p.Hash, p.Path),
					Metadata: map[string]string{"path": p.Path, "hash": p.Hash}}
			})
		}
	}
	return out, nil
}
