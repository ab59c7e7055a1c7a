package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/builder"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// BuilderLimits bound one builder check. Documents are capped at 3 MiB, below the gRPC
// transport's 4 MiB message limit, so that an oversized document is answered InvalidArgument
// VALUE_TOO_LARGE by the walk rather than ResourceExhausted by the transport (a larger message
// is still refused, by the transport).
var BuilderLimits = builder.Limits{MaxBytes: 3 << 20, MaxModuleDepth: 64}

// Answer bounds (stated in builder.proto). A refusal lists at most builder.MaxFindings
// violations (the status travels in a trailer; the message and the first ErrorInfo's "omitted"
// say how many more there were, and the refusal stands either way); each list of an answer at
// most maxBuilderListed entries; and everything rendered into one answer (pointers, paths,
// messages) at most maxAnswerBytes. Past any of them entries are counted, not rendered.
const (
	maxBuilderListed = 1000
	maxAnswerBytes   = 1 << 20
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
	tenancy  rulebook.Tenancy
	operator bool // builder.HeldToWalk: check_operator_can_build applies
}

// caller authorizes the call and resolves the member the check is about: the user behind a user
// token (on_behalf_of empty or its own name), or the user the service token names.
func (h *handlers) builderCaller(ctx context.Context, ws, onBehalfOf string) (builderCaller, error) {
	c, who, err := h.actingFor(ctx, ws, onBehalfOf)
	if err != nil {
		return builderCaller{}, err
	}
	var t rulebook.Tenancy
	if c.Tenancy != nil && c.Tenancy.Username == who {
		t = *c.Tenancy
	} else {
		if t, err = h.Store.ResolveTenancy(ctx, ws, store.ByUsername, who); err != nil {
			return builderCaller{}, mapErr(err)
		}
		if t.Disabled {
			return builderCaller{}, mapErr(rulebook.ErrMemberDisabled)
		}
	}
	return builderCaller{id: c.ID, tenancy: t, operator: builder.HeldToWalk(t.Role)}, nil
}

// builderMayBuild is builderCaller then canBuild, for the checks that need nothing between
// the two (CheckApp settles the caller's scopes first) nor the settings after.
func (h *handlers) builderMayBuild(ctx context.Context, ws, onBehalfOf string) (builderCaller, error) {
	bc, err := h.builderCaller(ctx, ws, onBehalfOf)
	if err != nil {
		return builderCaller{}, err
	}
	_, err = h.canBuild(ctx, bc)
	return bc, err
}

// canBuild is check_operator_can_build for operators, over the cached settings; it returns the
// settings so the caller reads them once.
func (h *handlers) canBuild(ctx context.Context, bc builderCaller) (rulebook.OperatorSettings, error) {
	if !bc.operator {
		return rulebook.OperatorSettings{}, nil
	}
	st, err := h.Settings.Cached(ctx, bc.tenancy.Workspace)
	if err != nil {
		return st, err
	}
	if err := rulebook.CanBuild(bc.tenancy.Role, st); err != nil {
		return st, mapErr(err)
	}
	return st, nil
}

func reasonOf(r builder.Reason) commonv1.ErrorReason {
	if v, ok := commonv1.ErrorReason_value["ERROR_REASON_"+string(r)]; ok {
		return commonv1.ErrorReason(v)
	}
	// Still a refusal: an unmapped reason never turns into a yes.
	return commonv1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// toProtoFindings renders the findings that fit the budget and returns how many did not.
func toProtoFindings(l builder.Findings, b *answerBudget) ([]*policyv1.BuilderFinding, int32) {
	out := make([]*policyv1.BuilderFinding, 0, len(l.List))
	omitted := l.Omitted
	for _, f := range l.List {
		if !b.take(len(f.Pointer) + len(f.Message) + 64) {
			omitted++
			continue
		}
		out = append(out, &policyv1.BuilderFinding{Reason: reasonOf(f.Reason).String(), Doc: string(f.Doc), Pointer: f.Pointer, Message: f.Message})
	}
	return out, int32(omitted)
}

// refusal is the one PermissionDenied carrying the listed findings; the message counts them all.
func refusal(r *builder.Refusal) error {
	b := newBudget()
	omitted := r.Findings.Omitted
	ds := make([]errs.Detail, 0, len(r.Findings.List))
	for _, f := range r.Findings.List {
		md := map[string]string{"doc": string(f.Doc)}
		size := len(f.Pointer) + len(f.Message) + 64
		for k, v := range f.Metadata {
			md[k] = v
			size += len(k) + len(v)
		}
		if !b.take(size) {
			omitted++
			continue
		}
		ds = append(ds, errs.Detail{Reason: reasonOf(f.Reason), Pointer: f.Pointer, Message: f.Message, Metadata: md})
	}
	msg := fmt.Sprintf("%s refused: %d violation(s)", r.What, len(ds)+omitted)
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

// checkError maps the checker's errors: a document the walk could not judge is InvalidArgument
// naming the field, the document, the pointer and the rule (a limit is VALUE_TOO_LARGE); a
// refusal is PermissionDenied with every listed finding; anything else (the workspace could
// not be read) goes through mapErr.
func checkError(err error) error {
	var ie *builder.InputError
	var ref *builder.Refusal
	switch {
	case errors.As(err, &ref):
		return refusal(ref)
	case errors.As(err, &ie):
	default:
		return mapErr(err)
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
		out = append(out, &policyv1.BuilderRef{Kind: protoKind(r.Kind), Path: r.Path, Pointer: ptr})
	}
	return out, 0
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
	bc, err := s.h.builderMayBuild(ctx, req.GetWorkspace(), req.GetOnBehalfOf())
	if err != nil {
		return nil, err
	}
	done, err := s.h.admit(ctx, len(req.GetFlowJson()))
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := s.h.checker.CheckFlow(ctx, bc.tenancy, req.GetFlowJson())
	if err != nil {
		return nil, checkError(err)
	}
	// Pointers read the parsed document: everything is rendered before this returns.
	defer res.Release()
	rep := res.Report
	b := newBudget()
	out := &policyv1.CheckFlowResponse{Role: roles.toProto(bc.tenancy.Role)}
	out.CodeFindings, out.CodeFindingsOmitted = toProtoFindings(res.Code, b)
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

var deployPaths = map[policyv1.DeployPath]builder.DeployPath{
	// No deploy path named: create_app / update_app, the platform's one endpoint that takes an
	// app value (the request's app_value_json), hence VALUE (docs/policy.md, "CheckApp's
	// default deploy path"). The source path is a different endpoint taking files, never an
	// app value, so a platform calling it knows to say SOURCE.
	policyv1.DeployPath_DEPLOY_PATH_UNSPECIFIED: builder.DeployMultipart,
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
	dp, ok := deployPaths[req.GetDeployPath()]
	if !ok {
		dp = builder.DeploySource // unreachable past the validator; the dangerous one if it were
	}
	res, err := s.h.checker.CheckApp(ctx, bc.tenancy, st, builder.AppRequest{Value: req.GetAppValueJson(),
		Policy: req.GetPolicyJson(), Deploy: dp, Scopes: scopes})
	if err != nil {
		return nil, checkError(err)
	}
	defer res.Release()
	b := newBudget()
	out := &policyv1.CheckAppResponse{Role: roles.toProto(bc.tenancy.Role), NormalizedPolicyJson: res.NormalizedPolicy,
		ExecutionMode: res.Report.ExecutionMode, Kind: string(res.Report.Kind)}
	out.CodeFindings, out.CodeFindingsOmitted = toProtoFindings(res.Code, b)
	out.PolicyPaths, out.PolicyPathsOmitted = listRefs(res.Report.PolicyPaths, b)
	out.ValuePaths, out.ValuePathsOmitted = listRefs(res.Report.ValuePaths, b)
	return out, nil
}

func (s *builderServer) CheckPreview(ctx context.Context, req *policyv1.CheckPreviewRequest) (*policyv1.CheckPreviewResponse, error) {
	bc, err := s.h.builderMayBuild(ctx, req.GetWorkspace(), req.GetOnBehalfOf())
	if err != nil {
		return nil, err
	}
	_, rawCode := req.GetTarget().(*policyv1.CheckPreviewRequest_RawCode)
	refs, err := s.h.checker.CheckPreview(ctx, bc.tenancy, req.GetPath(), rawCode)
	if err != nil {
		return nil, checkError(err)
	}
	out := &policyv1.CheckPreviewResponse{Role: roles.toProto(bc.tenancy.Role)}
	for _, r := range refs {
		out.Runnables = append(out.Runnables, &policyv1.BuilderRef{Kind: protoKind(r.Kind), Path: r.Path})
	}
	return out, nil
}

func protoKind(k builder.RunnableKind) policyv1.RunnableKind {
	if k == builder.KindFlow {
		return policyv1.RunnableKind_RUNNABLE_KIND_FLOW
	}
	return policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT
}
