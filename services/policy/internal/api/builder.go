package api

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/builder"
	"github.com/millwright/millwright/services/policy/internal/policy"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// BuilderLimits bound one builder check. Documents are capped at 3 MiB, below the gRPC
// transport's 4 MiB message limit, so that an oversized document is answered InvalidArgument
// VALUE_TOO_LARGE by the walk rather than ResourceExhausted by the transport (a larger message
// is still refused, by the transport).
var BuilderLimits = builder.Limits{MaxBytes: 3 << 20, MaxModuleDepth: 64}

// Answer bounds (stated in builder.proto). A refusal lists at most maxBuilderDetails
// violations (the status travels in a trailer; the message and the first ErrorInfo's "omitted"
// say how many more there were, and the refusal stands either way); each list of an answer at
// most maxBuilderListed entries; and everything rendered into one answer (pointers, paths,
// messages) at most maxAnswerBytes. Past any of them entries are counted, not rendered.
const (
	maxBuilderDetails = 100
	maxBuilderListed  = 1000
	maxAnswerBytes    = 1 << 20
)

// answerBudget is the byte budget of one answer, shared by all its lists.
type answerBudget struct{ left int }

func newBudget() *answerBudget { return &answerBudget{left: maxAnswerBytes} }

// take reserves n bytes; false when the answer is full.
func (b *answerBudget) take(n int) bool {
	if n > b.left {
		b.left = 0
		return false
	}
	b.left -= n
	return true
}

type builderServer struct {
	policyv1.UnimplementedBuilderServiceServer
	h *handlers
}

// builderCaller is who a builder check is about, and what it may do.
type builderCaller struct {
	id       auth.Identity
	tenancy  policy.Tenancy
	operator bool // operators (and any role that is not admin or developer) are held to the walk
}

// caller authorizes the call and resolves the member the check is about: the user behind a user
// token (on_behalf_of empty or its own name), or the user the service token names.
func (h *handlers) builderCaller(ctx context.Context, ws, onBehalfOf string) (builderCaller, error) {
	c, err := h.authorize(ctx, ws)
	if err != nil {
		return builderCaller{}, err
	}
	who, err := subject(c, onBehalfOf)
	if err != nil {
		return builderCaller{}, err
	}
	var t policy.Tenancy
	if c.Tenancy != nil && c.Tenancy.Username == who {
		t = *c.Tenancy
	} else {
		if t, err = h.Store.ResolveTenancy(ctx, ws, store.ByUsername, who); err != nil {
			return builderCaller{}, mapErr(err)
		}
		if t.Disabled {
			return builderCaller{}, mapErr(policy.ErrMemberDisabled)
		}
	}
	return builderCaller{id: c.ID, tenancy: t, operator: t.Role != policy.RoleAdmin && t.Role != policy.RoleDeveloper}, nil
}

// canBuild is check_operator_can_build for operators, over the cached settings; it returns the
// settings so the caller reads them once.
func (h *handlers) canBuild(ctx context.Context, bc builderCaller) (policy.OperatorSettings, error) {
	if !bc.operator {
		return policy.OperatorSettings{}, nil
	}
	st, err := h.Settings.Cached(ctx, bc.tenancy.Workspace)
	if err != nil {
		return st, err
	}
	if err := policy.CanBuild(bc.tenancy.Role, st); err != nil {
		return st, mapErr(err)
	}
	return st, nil
}

// finding is one violation, value-only or found by the service's own checks. Its pointer is
// rendered only if the finding is answered.
type finding struct {
	reason  commonv1.ErrorReason
	doc     builder.Doc
	pointer builder.Pointer
	suffix  string // appended to the rendered pointer (a member of the pointed value)
	message string
	md      map[string]string
}

func (f finding) renderPointer() string {
	p := f.pointer.String()
	if f.suffix != "" {
		p += f.suffix
	}
	return p
}

// findingList keeps the first maxBuilderDetails findings and counts the rest: a check over
// 20,000 unreadable references builds a hundred findings, not 20,000.
type findingList struct {
	list    []finding
	omitted int
}

// add appends the finding mk builds, or only counts it when the list is full.
func (l *findingList) add(mk func() finding) {
	if len(l.list) >= maxBuilderDetails {
		l.omitted++
		return
	}
	l.list = append(l.list, mk())
}

func (l *findingList) extend(o findingList) {
	for _, f := range o.list {
		l.add(func() finding { return f })
	}
	l.omitted += o.omitted
}

func (l *findingList) empty() bool { return len(l.list) == 0 && l.omitted == 0 }

func reasonOf(r builder.Reason) commonv1.ErrorReason {
	if v, ok := commonv1.ErrorReason_value["ERROR_REASON_"+string(r)]; ok {
		return commonv1.ErrorReason(v)
	}
	// Still a refusal: an unmapped reason never turns into a yes.
	return commonv1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// fromViolations takes the walk's violations (already capped) and the count it omitted.
func fromViolations(vs []builder.Violation, omitted int) findingList {
	var l findingList
	for _, v := range vs {
		l.add(func() finding {
			return finding{reason: reasonOf(v.Reason), doc: v.Doc, pointer: v.Pointer, message: v.Message}
		})
	}
	l.omitted += omitted
	return l
}

// toProtoFindings renders the findings that fit the budget and returns how many did not.
func toProtoFindings(l findingList, b *answerBudget) ([]*policyv1.BuilderFinding, int32) {
	out := make([]*policyv1.BuilderFinding, 0, len(l.list))
	omitted := l.omitted
	for _, f := range l.list {
		ptr := f.renderPointer()
		if !b.take(len(ptr) + len(f.message) + 64) {
			omitted++
			continue
		}
		out = append(out, &policyv1.BuilderFinding{Reason: f.reason.String(), Doc: string(f.doc), Pointer: ptr, Message: f.message})
	}
	return out, int32(omitted)
}

// refuse is the one PermissionDenied carrying the listed violations; the message counts them all.
func refuse(what string, l findingList) error {
	b := newBudget()
	omitted := l.omitted
	ds := make([]errs.Detail, 0, len(l.list))
	for _, f := range l.list {
		ptr := f.renderPointer()
		md := map[string]string{"doc": string(f.doc)}
		size := len(ptr) + len(f.message) + 64
		for k, v := range f.md {
			md[k] = v
			size += len(k) + len(v)
		}
		if !b.take(size) {
			omitted++
			continue
		}
		ds = append(ds, errs.Detail{Reason: f.reason, Pointer: ptr, Message: f.message, Metadata: md})
	}
	msg := fmt.Sprintf("%s refused: %d violation(s)", what, len(ds)+omitted)
	if omitted > 0 {
		msg += fmt.Sprintf(" (the first %d are listed)", len(ds))
		if len(ds) > 0 {
			ds[0].Metadata["omitted"] = fmt.Sprint(omitted)
		}
	}
	return errs.WithDetails(codes.PermissionDenied, msg, ds)
}

var docField = map[builder.Doc]string{
	builder.DocFlow: "flow_json", builder.DocAppValue: "app_value_json", builder.DocAppPolicy: "policy_json",
}

// inputError maps a document the walk could not judge to InvalidArgument naming the field, the
// document, the pointer and the rule; a limit is VALUE_TOO_LARGE.
func inputError(err error) error {
	ie, ok := err.(*builder.InputError)
	if !ok {
		return err
	}
	reason := commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD
	if ie.Limit {
		reason = commonv1.ErrorReason_ERROR_REASON_VALUE_TOO_LARGE
	}
	field := docField[ie.Doc]
	return errs.WithDetails(codes.InvalidArgument, field+": "+ie.Error(), []errs.Detail{{
		Reason: reason, Pointer: ie.Pointer, Message: ie.Rule,
		Metadata: map[string]string{"field": field, "doc": string(ie.Doc), "rule": ie.Rule},
	}})
}

func isHub(p string) bool { return strings.HasPrefix(p, "hub/") }

func kindRef(k builder.RunnableKind, p string) policy.Ref {
	if k == builder.KindFlow {
		return policy.Ref{Kind: policy.KindFlow, Path: p}
	}
	return policy.Ref{Kind: policy.KindScript, Path: p}
}

// listRefs renders at most maxBuilderListed references within the budget; the rest are counted.
func listRefs(refs []builder.RunnableRef, b *answerBudget) ([]*policyv1.BuilderRef, int32) {
	var out []*policyv1.BuilderRef
	for i, r := range refs {
		if i >= maxBuilderListed {
			return out, int32(len(refs) - len(out))
		}
		ptr := r.Pointer.String()
		if !b.take(len(r.Path) + len(ptr) + 16) {
			return out, int32(len(refs) - len(out))
		}
		k := policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT
		if r.Kind == builder.KindFlow {
			k = policyv1.RunnableKind_RUNNABLE_KIND_FLOW
		}
		out = append(out, &policyv1.BuilderRef{Kind: k, Path: r.Path, Pointer: ptr})
	}
	return out, 0
}

// surface is one list of runnable references and the document its pointers are into.
type surface struct {
	doc  builder.Doc
	refs []builder.RunnableRef
}

// checkReadable re-reads every referenced workspace path under the caller's RLS, in one query
// for all distinct paths of all surfaces, and returns a PATH_NOT_READABLE per unreadable
// reference. Hub paths are not looked up: the walk refuses them for operators, and they are
// not workspace runnables for anyone else. The walk has already bounded the references in
// number (builder.Limits.MaxRefs) and length (MaxRefBytes), so this work is linear.
func (h *handlers) checkReadable(ctx context.Context, bc builderCaller, surfaces ...surface) (findingList, error) {
	seen := map[policy.Ref]struct{}{}
	var refs []policy.Ref
	for _, s := range surfaces {
		for _, r := range s.refs {
			if isHub(r.Path) {
				continue
			}
			ref := kindRef(r.Kind, r.Path)
			if _, ok := seen[ref]; !ok {
				seen[ref] = struct{}{}
				refs = append(refs, ref)
			}
		}
	}
	if len(refs) == 0 {
		return findingList{}, nil
	}
	ok, err := h.Store.ReadablePaths(ctx, bc.tenancy.Username, bc.tenancy.Workspace, refs)
	if err != nil {
		return findingList{}, mapErr(err)
	}
	var out findingList
	for _, s := range surfaces {
		for _, r := range s.refs {
			if isHub(r.Path) {
				continue
			}
			if _, yes := ok[kindRef(r.Kind, r.Path)]; !yes {
				out.add(func() finding {
					return finding{reason: commonv1.ErrorReason_ERROR_REASON_PATH_NOT_READABLE, doc: s.doc, pointer: r.Pointer,
						message: fmt.Sprintf("%s %s is not readable by %s (or does not exist)", r.Kind, r.Path, bc.tenancy.Username),
						md:      map[string]string{"kind": string(r.Kind), "path": r.Path}}
				})
			}
		}
	}
	return out, nil
}

// admit holds a share of the process's budget for expensive checks, weighted by the request's
// document bytes, so that a burst of large checks queues (up to the wait bound) and then gets
// ResourceExhausted OVERLOADED instead of exhausting memory. Cheap RPCs (Authenticate, which
// roleset and billing call on every request) never take from it.
func (h *handlers) admit(ctx context.Context, docBytes int) (release func(), err error) {
	w := int64(docBytes) + checkBaseWeight
	if w > h.checkCap {
		w = h.checkCap
	}
	wctx, cancel := context.WithTimeout(ctx, h.CheckQueueWait)
	defer cancel()
	if err := h.checks.Acquire(wctx, w); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errs.New(codes.ResourceExhausted, commonv1.ErrorReason_ERROR_REASON_OVERLOADED,
			fmt.Sprintf("too many builder checks in flight in this process (%d bytes of documents at most); retry later", h.checkCap),
			map[string]string{"limit_bytes": fmt.Sprint(h.checkCap)})
	}
	return func() { h.checks.Release(w) }, nil
}

func (s *builderServer) CheckFlow(ctx context.Context, req *policyv1.CheckFlowRequest) (*policyv1.CheckFlowResponse, error) {
	bc, err := s.h.builderCaller(ctx, req.GetWorkspace(), req.GetOnBehalfOf())
	if err != nil {
		return nil, err
	}
	if _, err := s.h.canBuild(ctx, bc); err != nil {
		return nil, err
	}
	done, err := s.h.admit(ctx, len(req.GetFlowJson()))
	if err != nil {
		return nil, err
	}
	defer done()
	// The string form: the 2 MB field is parsed in place rather than copied to []byte and back.
	rep, err := builder.WalkFlowString(req.GetFlowJson(), BuilderLimits)
	if err != nil {
		return nil, inputError(err)
	}
	// Pointers read the parsed document: everything is rendered before this returns.
	defer rep.Release()
	var refused, code findingList
	if bc.operator {
		refused = fromViolations(rep.Violations, rep.ViolationsOmitted)
	} else {
		code = fromViolations(rep.Violations, rep.ViolationsOmitted)
	}

	// The three database checks (tags, paths, pins) read independent things, each in its own
	// statement or transaction as before; they run concurrently to overlap their round trips
	// (~20 ms in sequence on a 10,000-step flow). Findings and errors are combined in the
	// sequential order (tags, then paths, then pins), so the answer is unchanged.
	var (
		wg                      sync.WaitGroup
		tagFs, unread, pinFs    findingList
		tagErr, readErr, pinErr error
	)
	wg.Add(3)
	go func() { defer wg.Done(); tagFs, tagErr = s.checkTags(ctx, bc, rep.Tags) }()
	go func() {
		defer wg.Done()
		// Paths: every runnable (pinned steps included) re-read under the caller's RLS, one query.
		unread, readErr = s.h.checkReadable(ctx, bc, surface{builder.DocFlow, rep.Runnables})
	}()
	go func() { defer wg.Done(); pinFs, pinErr = s.checkPins(ctx, bc, rep.Pins) }()
	wg.Wait()
	for _, err := range []error{tagErr, readErr, pinErr} {
		if err != nil {
			return nil, err
		}
	}
	refused.extend(tagFs)
	refused.extend(unread)
	refused.extend(pinFs)
	if !refused.empty() {
		return nil, refuse("flow", refused)
	}

	b := newBudget()
	out := &policyv1.CheckFlowResponse{Role: roleToProto(bc.tenancy.Role)}
	out.CodeFindings, out.CodeFindingsOmitted = toProtoFindings(code, b)
	for i, t := range rep.Tags {
		ptr := t.Pointer.String()
		if i >= maxBuilderListed || !b.take(len(t.Tag)+len(ptr)+16) {
			out.TagsOmitted = int32(len(rep.Tags) - len(out.Tags))
			break
		}
		out.Tags = append(out.Tags, &policyv1.BuilderTag{Tag: t.Tag, Pointer: ptr})
	}
	out.Runnables, out.RunnablesOmitted = listRefs(rep.Runnables, b)
	for i, p := range rep.Pins {
		ptr := p.Pointer.String()
		if i >= maxBuilderListed || !b.take(len(p.Path)+len(p.Hash)+len(ptr)+16) {
			out.PinsOmitted = int32(len(rep.Pins) - len(out.Pins))
			break
		}
		out.Pins = append(out.Pins, &policyv1.BuilderPin{Path: p.Path, Hash: p.Hash, Pointer: ptr})
	}
	return out, nil
}

// checkTags reads the workspace's tag rules once, decides each distinct tag once and reports
// every refused tag.
func (s *builderServer) checkTags(ctx context.Context, bc builderCaller, tags []builder.TagRef) (findingList, error) {
	var out findingList
	if len(tags) == 0 {
		return out, nil
	}
	rules, err := s.h.Store.WorkerTags(ctx, bc.tenancy.Workspace)
	if err != nil {
		return out, mapErr(err)
	}
	verdict := map[string]error{}
	for _, t := range tags {
		e, done := verdict[t.Tag]
		if !done {
			e = policy.CheckTags(rules, bc.tenancy.Role, []string{t.Tag})
			verdict[t.Tag] = e
		}
		if e != nil {
			out.add(func() finding {
				rule := "unknown"
				if te, ok := e.(*policy.TagError); ok {
					rule = te.Reason
				}
				return finding{reason: commonv1.ErrorReason_ERROR_REASON_TAG_NOT_ALLOWED, doc: builder.DocFlow,
					pointer: t.Pointer, message: e.Error(), md: map[string]string{"tag": t.Tag, "rule": rule}}
			})
		}
	}
	return out, nil
}

// checkPins: a step carrying a hash is dispatched by the hash alone, so the hash must be a
// version of the path beside it, in this workspace. One query for every distinct pair.
func (s *builderServer) checkPins(ctx context.Context, bc builderCaller, pinRefs []builder.PinRef) (findingList, error) {
	var out findingList
	var pins []policy.Pin
	seenPin := map[policy.Pin]struct{}{}
	for _, p := range pinRefs {
		pin := policy.Pin{Path: p.Path, Hash: p.Hash}
		if _, ok := seenPin[pin]; !ok && !isHub(p.Path) {
			seenPin[pin] = struct{}{}
			pins = append(pins, pin)
		}
	}
	if len(pins) == 0 {
		return out, nil
	}
	found, err := s.h.Store.PinnedVersions(ctx, bc.tenancy.Workspace, pins)
	if err != nil {
		return out, mapErr(err)
	}
	for _, p := range pinRefs {
		if isHub(p.Path) {
			continue
		}
		if _, ok := found[policy.Pin{Path: p.Path, Hash: p.Hash}]; !ok {
			out.add(func() finding {
				return finding{reason: commonv1.ErrorReason_ERROR_REASON_HASH_MISMATCH, doc: builder.DocFlow,
					pointer: p.Pointer, suffix: "/hash", message: fmt.Sprintf("hash %s is not a version of script %s in this workspace", p.Hash, p.Path),
					md: map[string]string{"path": p.Path, "hash": p.Hash}}
			})
		}
	}
	return out, nil
}

var deployPaths = map[policyv1.DeployPath]builder.DeployPath{
	// An app value deploy compiles nothing server-side, like the multipart path.
	policyv1.DeployPath_DEPLOY_PATH_VALUE:     builder.DeployMultipart,
	policyv1.DeployPath_DEPLOY_PATH_MULTIPART: builder.DeployMultipart,
	policyv1.DeployPath_DEPLOY_PATH_SOURCE:    builder.DeploySource,
}

func (s *builderServer) CheckApp(ctx context.Context, req *policyv1.CheckAppRequest) (*policyv1.CheckAppResponse, error) {
	bc, err := s.h.builderCaller(ctx, req.GetWorkspace(), req.GetOnBehalfOf())
	if err != nil {
		return nil, err
	}
	// The credential's scopes: a user token's own; the service token reports the scopes of the
	// credential it authenticated for the user (none: fail closed).
	scopes := req.GetCallerScopes()
	if bc.id.Kind == auth.User {
		if len(scopes) > 0 {
			return nil, denied(commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, "only the service token may set caller_scopes", nil)
		}
		scopes = bc.id.Scopes
	}
	st, err := s.h.canBuild(ctx, bc)
	if err != nil {
		return nil, err
	}
	done, err := s.h.admit(ctx, len(req.GetAppValueJson())+len(req.GetPolicyJson()))
	if err != nil {
		return nil, err
	}
	defer done()
	rep, err := builder.WalkApp([]byte(req.GetAppValueJson()), []byte(req.GetPolicyJson()), BuilderLimits,
		builder.AppOptions{StripSDKReadScopes: bc.operator && st.StripBuilderSDKReadScopes})
	if err != nil {
		return nil, inputError(err)
	}
	defer rep.Release()
	var refused, code findingList
	if bc.operator {
		refused = fromViolations(rep.Violations, rep.ViolationsOmitted)
	} else {
		code = fromViolations(rep.Violations, rep.ViolationsOmitted)
	}
	dp, ok := deployPaths[req.GetDeployPath()]
	if !ok {
		dp = builder.DeploySource // unreachable past the validator; the dangerous one if it were
	}
	refused.extend(fromViolations(builder.CheckDeployPath(dp, bc.operator, scopes), 0))
	// Two surfaces, not one list: the policy's triggerables and the value's runnableByPath.
	unread, err := s.h.checkReadable(ctx, bc, surface{builder.DocAppPolicy, rep.PolicyPaths}, surface{builder.DocAppValue, rep.ValuePaths})
	if err != nil {
		return nil, err
	}
	refused.extend(unread)
	if !refused.empty() {
		return nil, refuse("app", refused)
	}
	normalized := string(rep.NormalizedPolicy)
	if !bc.operator {
		// Not a builder app: the platform stores the policy as sent.
		normalized = req.GetPolicyJson()
		if t := strings.TrimSpace(normalized); t == "" || t == "null" {
			normalized = "{}"
		}
	}
	b := newBudget()
	out := &policyv1.CheckAppResponse{Role: roleToProto(bc.tenancy.Role), NormalizedPolicyJson: normalized,
		ExecutionMode: rep.ExecutionMode, Kind: string(rep.Kind)}
	out.CodeFindings, out.CodeFindingsOmitted = toProtoFindings(code, b)
	out.PolicyPaths, out.PolicyPathsOmitted = listRefs(rep.PolicyPaths, b)
	out.ValuePaths, out.ValuePathsOmitted = listRefs(rep.ValuePaths, b)
	return out, nil
}

func (s *builderServer) CheckPreview(ctx context.Context, req *policyv1.CheckPreviewRequest) (*policyv1.CheckPreviewResponse, error) {
	bc, err := s.h.builderCaller(ctx, req.GetWorkspace(), req.GetOnBehalfOf())
	if err != nil {
		return nil, err
	}
	if _, err := s.h.canBuild(ctx, bc); err != nil {
		return nil, err
	}
	_, rawCode := req.GetTarget().(*policyv1.CheckPreviewRequest_RawCode)
	refused := fromViolations(builder.CheckPreview(req.GetPath(), rawCode, bc.operator), 0)
	out := &policyv1.CheckPreviewResponse{Role: roleToProto(bc.tenancy.Role)}
	if !rawCode {
		// One reading per path (builder.PreviewRefs): the path is at most 1 KiB (validator), and
		// only the reading after the last ':' can name a runnable.
		cands, bare := builder.PreviewRefs(req.GetPath())
		var ws []builder.RunnableRef
		for _, c := range cands {
			if !isHub(c.Path) {
				ws = append(ws, c)
			}
		}
		unread, err := s.h.checkReadable(ctx, bc, surface{builder.DocRequest, ws})
		if err != nil {
			return nil, err
		}
		bad := map[builder.RunnableRef]bool{}
		for _, u := range unread.list {
			bad[builder.RunnableRef{Kind: builder.RunnableKind(u.md["kind"]), Path: u.md["path"]}] = true
		}
		for _, c := range ws {
			if !bad[builder.RunnableRef{Kind: c.Kind, Path: c.Path}] {
				out.Runnables = append(out.Runnables, &policyv1.BuilderRef{Kind: protoKind(c.Kind), Path: c.Path})
			}
		}
		switch {
		case bare && len(ws) == 2 && len(unread.list) == 2:
			// A bare path resolves to the script or the flow of that path: neither is readable.
			u := unread.list[0]
			u.md = map[string]string{"kind": "script or flow", "path": u.md["path"]}
			u.message = fmt.Sprintf("no script or flow %s is readable by %s", u.md["path"], bc.tenancy.Username)
			refused.add(func() finding { return u })
		case !bare:
			refused.extend(unread)
		}
	}
	if !refused.empty() {
		return nil, refuse("preview", refused)
	}
	return out, nil
}

func protoKind(k builder.RunnableKind) policyv1.RunnableKind {
	if k == builder.KindFlow {
		return policyv1.RunnableKind_RUNNABLE_KIND_FLOW
	}
	return policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT
}
