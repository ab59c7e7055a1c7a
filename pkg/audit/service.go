package audit

import (
	"context"
	"encoding/hex"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/validate"
)

// Service is every service's AuditService: the trail of the recorder it is given. Only the
// superadmin may read it: the trail names every actor of every workspace.
type Service struct {
	auditv1.UnimplementedAuditServiceServer
	rec *Recorder
	// WatchPoll is how often a Watch looks for new events (default 250 ms).
	WatchPoll time.Duration
}

// NewService serves rec's trail.
func NewService(rec *Recorder) *Service { return &Service{rec: rec, WatchPoll: 250 * time.Millisecond} }

// Register registers s on gs.
func (s *Service) Register(gs *grpc.Server) { auditv1.RegisterAuditServiceServer(gs, s) }

// TrailRules are the rules of AuditService itself, which pkg/server registers beside every
// service's own: a service's rule table adds them (Rules.With).
func TrailRules() Rules {
	reads := NotAudited("the trail's own reads (superadmin only): recording them would add an event for every look at the trail")
	return Rules{
		auditv1.AuditService_ListAuditEvents_FullMethodName:  reads,
		auditv1.AuditService_WatchAuditEvents_FullMethodName: reads,
		auditv1.AuditService_VerifyAuditChain_FullMethodName: reads,
		auditv1.AuditService_HashAuditValue_FullMethodName: NotAudited("answers the keyed hash of a value the auditor " +
			"already holds (superadmin only): it reveals nothing the trail does not"),
	}
}

// Outcomes lists the outcomes a filter may name.
var Outcomes = []string{Granted, Refused, Failed, Requested}

// Validators adds the checks of the AuditService requests to r.
func Validators(r *validate.Registry) {
	validate.Add(r, func(m *auditv1.ListAuditEventsRequest) error {
		return validate.First(
			validate.MaxLen("service", m.GetService(), 50),
			validate.MaxLen("workspace", m.GetWorkspace(), 256),
			validate.MaxLen("actor", m.GetActor(), 256),
			oneOf("outcome", m.GetOutcome(), Outcomes),
			validate.MaxLen("rule", m.GetRule(), 100),
			validate.MaxLen("object", m.GetObject(), 512),
			oneOf("class", m.GetClass(), classNames()),
			validate.MaxLen("rpc", m.GetRpc(), 256),
			pageSize(m.GetPageSize()),
			pageToken(m.GetPageToken()),
		)
	})
	validate.Add(r, func(m *auditv1.WatchAuditEventsRequest) error { return validate.MaxLen("service", m.GetService(), 50) })
	validate.Add(r, func(m *auditv1.HashAuditValueRequest) error {
		return validate.First(validate.MaxLen("service", m.GetService(), 50), validate.MaxLen("value", m.GetValue(), 4096))
	})
	validate.Add(r, func(m *auditv1.VerifyAuditChainRequest) error { return validate.MaxLen("service", m.GetService(), 50) })
}

func classNames() []string {
	out := make([]string, len(Classes))
	for i, c := range Classes {
		out[i] = string(c)
	}
	return out
}

// oneOf allows v empty (no filter) or one of allowed.
func oneOf(field, v string, allowed []string) error {
	if v == "" {
		return nil
	}
	return validate.OneOf(field, v, allowed...)
}

// maxPage is the largest page ListAuditEvents answers.
const maxPage = 1000

func pageSize(n int32) error {
	if n < 0 || n > maxPage {
		return errs.InvalidField("page_size", "range", "page_size must be 0..1000")
	}
	return nil
}

// A page token is the last seq of the previous page.
func pageToken(t string) error {
	if t == "" {
		return nil
	}
	if n, err := strconv.ParseInt(t, 10, 64); err != nil || n < 0 {
		return errs.InvalidField("page_token", "page_token", "page_token must be the next_page_token of a previous answer")
	}
	return nil
}

// allow admits the superadmin, and a request for this service's trail only.
func (s *Service) allow(ctx context.Context, service string) error {
	id, ok := auth.FromContext(ctx)
	if !ok || id.Kind != auth.Superadmin {
		return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED,
			"only the superadmin token may read the audit trail", nil)
	}
	if service != "" && service != s.rec.Service() {
		return errs.InvalidField("service", "this_service", "this is the "+s.rec.Service()+" service's trail; ask "+service+" for its own")
	}
	return nil
}

func (s *Service) ListAuditEvents(ctx context.Context, req *auditv1.ListAuditEventsRequest) (*auditv1.ListAuditEventsResponse, error) {
	if err := s.allow(ctx, req.GetService()); err != nil {
		return nil, err
	}
	after, _ := strconv.ParseInt(req.GetPageToken(), 10, 64)
	limit := int(req.GetPageSize())
	if limit == 0 {
		limit = 100
	}
	f := Filter{Workspace: req.GetWorkspace(), Actor: req.GetActor(), Outcome: req.GetOutcome(), Rule: req.GetRule(),
		Object: req.GetObject(), Class: req.GetClass(), RPC: req.GetRpc(), AfterSeq: after, Limit: limit + 1}
	if t := req.GetStartTime(); t != nil {
		f.Start = t.AsTime()
	}
	if t := req.GetEndTime(); t != nil {
		f.End = t.AsTime()
	}
	events, err := s.rec.Store().List(ctx, f)
	if err != nil {
		return nil, errs.RewriteError(ctx, err)
	}
	out := &auditv1.ListAuditEventsResponse{}
	if len(events) > limit {
		events = events[:limit]
		out.NextPageToken = strconv.FormatInt(events[limit-1].Seq, 10)
	}
	for _, e := range events {
		out.Events = append(out.Events, ToProto(e))
	}
	return out, nil
}

func (s *Service) WatchAuditEvents(req *auditv1.WatchAuditEventsRequest, srv grpc.ServerStreamingServer[auditv1.WatchAuditEventsResponse]) error {
	ctx := srv.Context()
	if err := s.allow(ctx, req.GetService()); err != nil {
		return err
	}
	after := req.GetAfterSeq()
	if after < 0 {
		var err error
		if after, err = s.rec.Store().Head(ctx); err != nil {
			return errs.RewriteError(ctx, err)
		}
	}
	t := time.NewTicker(s.WatchPoll)
	defer t.Stop()
	for {
		events, err := s.rec.Store().List(ctx, Filter{AfterSeq: after, Limit: maxPage})
		if ctx.Err() != nil {
			return nil // the watcher left
		}
		if err != nil {
			return errs.RewriteError(ctx, err)
		}
		for _, e := range events {
			if err := srv.Send(&auditv1.WatchAuditEventsResponse{Event: ToProto(e)}); err != nil {
				return err
			}
			after = e.Seq
		}
		if len(events) == maxPage {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Service) HashAuditValue(ctx context.Context, req *auditv1.HashAuditValueRequest) (*auditv1.HashAuditValueResponse, error) {
	if err := s.allow(ctx, req.GetService()); err != nil {
		return nil, err
	}
	h := s.rec.Hasher()
	if h == nil {
		return nil, errs.New(codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
			"this service runs without --audit-key: its trail records secrets as \"redacted\", so there is no hash to compare", nil)
	}
	return &auditv1.HashAuditValueResponse{Hash: h.Hash(req.GetValue())}, nil
}

func (s *Service) VerifyAuditChain(ctx context.Context, req *auditv1.VerifyAuditChainRequest) (*auditv1.VerifyAuditChainResponse, error) {
	if err := s.allow(ctx, req.GetService()); err != nil {
		return nil, err
	}
	v, err := s.rec.Store().Verify(ctx)
	if err != nil {
		return nil, errs.RewriteError(ctx, err)
	}
	return &auditv1.VerifyAuditChainResponse{Ok: v.OK, Checked: v.Checked, FirstBadSeq: v.FirstBadSeq, Problem: v.Problem}, nil
}

// ToProto is the API form of a stored event.
func ToProto(e Stored) *auditv1.AuditEvent {
	return &auditv1.AuditEvent{
		Seq: e.Seq, Time: timestamppb.New(e.Time), LastTime: timestamppb.New(e.LastTime), Count: e.Count,
		Service: e.Service, Replica: e.Replica, Rpc: e.RPC, Class: string(e.Class), Outcome: e.Outcome, Code: e.Code,
		Rule: e.Rule, Pointer: e.Pointer, ActorKind: e.ActorKind, Actor: e.Actor, Workspace: e.Workspace,
		OnBehalfOf: e.OnBehalfOf, Object: e.Object, Details: e.Details, RequestId: e.RequestID, TraceId: e.TraceID,
		Hash: hexOf(e.Hash), PrevHash: hexOf(e.PrevHash),
	}
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }
