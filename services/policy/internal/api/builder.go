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

// maxBuilderDetails caps the ErrorInfos of one refusal (the status travels in a trailer). The
// message says how many violations there were in all; the refusal stands either way.
const maxBuilderDetails = 1000

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

// finding is one violation, value-only or found by the service's own checks.
type finding struct {
	reason  commonv1.ErrorReason
	doc     builder.Doc
	pointer string
	message string
	md      map[string]string
}

func reasonOf(r builder.Reason) commonv1.ErrorReason {
	if v, ok := commonv1.ErrorReason_value["ERROR_REASON_"+string(r)]; ok {
		return commonv1.ErrorReason(v)
	}
	// Still a refusal: an unmapped reason never turns into a yes.
	return commonv1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

func fromViolations(vs []builder.Violation) []finding {
	out := make([]finding, 0, len(vs))
	for _, v := range vs {
		out = append(out, finding{reason: reasonOf(v.Reason), doc: v.Doc, pointer: v.Pointer, message: v.Message})
	}
	return out
}

func toProtoFindings(fs []finding) []*policyv1.BuilderFinding {
	out := make([]*policyv1.BuilderFinding, 0, len(fs))
	for _, f := range fs {
		out = append(out, &policyv1.BuilderFinding{Reason: f.reason.String(), Doc: string(f.doc), Pointer: f.pointer, Message: f.message})
	}
	return out
}

// refuse is the one PermissionDenied carrying every violation (up to maxBuilderDetails).
func refuse(what string, fs []finding) error {
	n := len(fs)
	msg := fmt.Sprintf("%s refused: %d violation(s)", what, n)
	if n > maxBuilderDetails {
		msg += fmt.Sprintf(" (the first %d are listed)", maxBuilderDetails)
		fs = fs[:maxBuilderDetails]
	}
	ds := make([]errs.Detail, len(fs))
	for i, f := range fs {
		md := map[string]string{"doc": string(f.doc)}
		for k, v := range f.md {
			md[k] = v
		}
		ds[i] = errs.Detail{Reason: f.reason, Pointer: f.pointer, Message: f.message, Metadata: md}
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

func refToProto(r builder.RunnableRef) *policyv1.BuilderRef {
	k := policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT
	if r.Kind == builder.KindFlow {
		k = policyv1.RunnableKind_RUNNABLE_KIND_FLOW
	}
	return &policyv1.BuilderRef{Kind: k, Path: r.Path, Pointer: r.Pointer}
}

// surface is one list of runnable references and the document its pointers are into.
type surface struct {
	doc  builder.Doc
	refs []builder.RunnableRef
}

// checkReadable re-reads every referenced workspace path under the caller's RLS, in one query
// for all distinct paths of all surfaces, and returns a PATH_NOT_READABLE per unreadable
// reference. Hub paths are not looked up: the walk refuses them for operators, and they are
// not workspace runnables for anyone else.
func (h *handlers) checkReadable(ctx context.Context, bc builderCaller, surfaces ...surface) ([]finding, error) {
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
		return nil, nil
	}
	ok, err := h.Store.ReadablePaths(ctx, bc.tenancy.Username, bc.tenancy.Workspace, refs)
	if err != nil {
		return nil, mapErr(err)
	}
	var out []finding
	for _, s := range surfaces {
		for _, r := range s.refs {
			if isHub(r.Path) {
				continue
			}
			if _, yes := ok[kindRef(r.Kind, r.Path)]; !yes {
				out = append(out, finding{reason: commonv1.ErrorReason_ERROR_REASON_PATH_NOT_READABLE, doc: s.doc, pointer: r.Pointer,
					message: fmt.Sprintf("%s %s is not readable by %s (or does not exist)", r.Kind, r.Path, bc.tenancy.Username),
					md:      map[string]string{"kind": string(r.Kind), "path": r.Path}})
			}
		}
	}
	return out, nil
}

func (s *builderServer) CheckFlow(ctx context.Context, req *policyv1.CheckFlowRequest) (*policyv1.CheckFlowResponse, error) {
	bc, err := s.h.builderCaller(ctx, req.GetWorkspace(), req.GetOnBehalfOf())
	if err != nil {
		return nil, err
	}
	if _, err := s.h.canBuild(ctx, bc); err != nil {
		return nil, err
	}
	// The string form: the 2 MB field is parsed in place rather than copied to []byte and back.
	rep, err := builder.WalkFlowString(req.GetFlowJson(), BuilderLimits)
	if err != nil {
		return nil, inputError(err)
	}
	var refused, code []finding
	if bc.operator {
		refused = fromViolations(rep.Violations)
	} else {
		code = fromViolations(rep.Violations)
	}

	// The three database checks (tags, paths, pins) read independent things, each in its own
	// statement or transaction as before; they run concurrently to overlap their round trips
	// (~20 ms in sequence on a 10,000-step flow). Findings and errors are combined in the
	// sequential order (tags, then paths, then pins), so the answer is unchanged.
	var (
		wg                      sync.WaitGroup
		tagFs, unread, pinFs    []finding
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
	refused = append(refused, tagFs...)
	refused = append(refused, unread...)
	refused = append(refused, pinFs...)
	if len(refused) > 0 {
		return nil, refuse("flow", refused)
	}

	out := &policyv1.CheckFlowResponse{Role: roleToProto(bc.tenancy.Role), CodeFindings: toProtoFindings(code),
		Tags: make([]*policyv1.BuilderTag, len(rep.Tags)), Runnables: make([]*policyv1.BuilderRef, len(rep.Runnables)),
		Pins: make([]*policyv1.BuilderPin, len(rep.Pins))}
	for i, t := range rep.Tags {
		out.Tags[i] = &policyv1.BuilderTag{Tag: t.Tag, Pointer: t.Pointer}
	}
	for i, r := range rep.Runnables {
		out.Runnables[i] = refToProto(r)
	}
	for i, p := range rep.Pins {
		out.Pins[i] = &policyv1.BuilderPin{Path: p.Path, Hash: p.Hash, Pointer: p.Pointer}
	}
	return out, nil
}

// checkTags reads the workspace's tag rules once, decides each distinct tag once and reports
// every refused tag.
func (s *builderServer) checkTags(ctx context.Context, bc builderCaller, tags []builder.TagRef) ([]finding, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	rules, err := s.h.Store.WorkerTags(ctx, bc.tenancy.Workspace)
	if err != nil {
		return nil, mapErr(err)
	}
	var out []finding
	verdict := map[string]error{}
	for _, t := range tags {
		e, done := verdict[t.Tag]
		if !done {
			e = policy.CheckTags(rules, bc.tenancy.Role, []string{t.Tag})
			verdict[t.Tag] = e
		}
		if e != nil {
			rule := "unknown"
			if te, ok := e.(*policy.TagError); ok {
				rule = te.Reason
			}
			out = append(out, finding{reason: commonv1.ErrorReason_ERROR_REASON_TAG_NOT_ALLOWED, doc: builder.DocFlow,
				pointer: t.Pointer, message: e.Error(), md: map[string]string{"tag": t.Tag, "rule": rule}})
		}
	}
	return out, nil
}

// checkPins: a step carrying a hash is dispatched by the hash alone, so the hash must be a
// version of the path beside it, in this workspace. One query for every distinct pair.
func (s *builderServer) checkPins(ctx context.Context, bc builderCaller, pinRefs []builder.PinRef) ([]finding, error) {
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
		return nil, nil
	}
	found, err := s.h.Store.PinnedVersions(ctx, bc.tenancy.Workspace, pins)
	if err != nil {
		return nil, mapErr(err)
	}
	var out []finding
	for _, p := range pinRefs {
		if isHub(p.Path) {
			continue
		}
		if _, ok := found[policy.Pin{Path: p.Path, Hash: p.Hash}]; !ok {
			out = append(out, finding{reason: commonv1.ErrorReason_ERROR_REASON_HASH_MISMATCH, doc: builder.DocFlow,
				pointer: p.Pointer + "/hash", message: fmt.Sprintf("hash %s is not a version of script %s in this workspace", p.Hash, p.Path),
				md: map[string]string{"path": p.Path, "hash": p.Hash}})
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
	rep, err := builder.WalkApp([]byte(req.GetAppValueJson()), []byte(req.GetPolicyJson()), BuilderLimits,
		builder.AppOptions{StripSDKReadScopes: bc.operator && st.StripBuilderSDKReadScopes})
	if err != nil {
		return nil, inputError(err)
	}
	var refused, code []finding
	if bc.operator {
		refused = fromViolations(rep.Violations)
	} else {
		code = fromViolations(rep.Violations)
	}
	dp, ok := deployPaths[req.GetDeployPath()]
	if !ok {
		dp = builder.DeploySource // unreachable past the validator; the dangerous one if it were
	}
	refused = append(refused, fromViolations(builder.CheckDeployPath(dp, bc.operator, scopes))...)
	// Two surfaces, not one list: the policy's triggerables and the value's runnableByPath.
	unread, err := s.h.checkReadable(ctx, bc, surface{builder.DocAppPolicy, rep.PolicyPaths}, surface{builder.DocAppValue, rep.ValuePaths})
	if err != nil {
		return nil, err
	}
	refused = append(refused, unread...)
	if len(refused) > 0 {
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
	out := &policyv1.CheckAppResponse{Role: roleToProto(bc.tenancy.Role), NormalizedPolicyJson: normalized,
		ExecutionMode: rep.ExecutionMode, Kind: string(rep.Kind), CodeFindings: toProtoFindings(code)}
	for _, r := range rep.PolicyPaths {
		out.PolicyPaths = append(out.PolicyPaths, refToProto(r))
	}
	for _, r := range rep.ValuePaths {
		out.ValuePaths = append(out.ValuePaths, refToProto(r))
	}
	return out, nil
}

// previewRefs are the workspace runnables a preview path can resolve to: every "script/<p>" or
// "flow/<p>" after any ':' (the component prefix is unrestricted), or, for a bare path, the
// script or the flow of that path.
func previewRefs(p string) (cands []builder.RunnableRef, bare bool) {
	for i := -1; i < len(p); i++ {
		if i >= 0 && p[i] != ':' {
			continue
		}
		c := p[i+1:]
		switch {
		case strings.HasPrefix(c, "script/"):
			cands = append(cands, builder.RunnableRef{Kind: builder.KindScript, Path: c[len("script/"):]})
		case strings.HasPrefix(c, "flow/"):
			cands = append(cands, builder.RunnableRef{Kind: builder.KindFlow, Path: c[len("flow/"):]})
		case strings.HasPrefix(c, "hubscript/"):
			cands = append(cands, builder.RunnableRef{Kind: builder.KindScript, Path: "hub/" + c[len("hubscript/"):]})
		}
	}
	if len(cands) == 0 {
		return []builder.RunnableRef{{Kind: builder.KindScript, Path: p}, {Kind: builder.KindFlow, Path: p}}, true
	}
	return cands, false
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
	refused := fromViolations(builder.CheckPreview(req.GetPath(), rawCode, bc.operator))
	out := &policyv1.CheckPreviewResponse{Role: roleToProto(bc.tenancy.Role)}
	if !rawCode {
		cands, bare := previewRefs(req.GetPath())
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
		for _, u := range unread {
			bad[builder.RunnableRef{Kind: builder.RunnableKind(u.md["kind"]), Path: u.md["path"]}] = true
		}
		for _, c := range ws {
			if !bad[builder.RunnableRef{Kind: c.Kind, Path: c.Path}] {
				out.Runnables = append(out.Runnables, refToProto(c))
			}
		}
		switch {
		case bare && len(ws) == 2 && len(unread) == 2:
			// A bare path resolves to the script or the flow of that path: neither is readable.
			u := unread[0]
			u.md = map[string]string{"kind": "script or flow", "path": u.md["path"]}
			u.message = fmt.Sprintf("no script or flow %s is readable by %s", u.md["path"], bc.tenancy.Username)
			refused = append(refused, u)
		case !bare:
			refused = append(refused, unread...)
		}
	}
	if len(refused) > 0 {
		return nil, refuse("preview", refused)
	}
	return out, nil
}
