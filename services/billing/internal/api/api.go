package api

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/paging"
	"github.com/millwright/millwright/pkg/validate"
	"github.com/millwright/millwright/services/billing/internal/projection"
	"github.com/millwright/millwright/services/billing/internal/seats"
	"github.com/millwright/millwright/services/billing/internal/store"
)

// Waiter blocks until the projection has applied at least pos, or fails with
// projection.ErrBehind.
type Waiter interface {
	WaitFor(ctx context.Context, pos int64, bound time.Duration) error
}

// Server implements billingv1.BillingServiceServer.
type Server struct {
	billingv1.UnimplementedBillingServiceServer
	store *store.Store
	wait  Waiter
	bound time.Duration
}

// New returns the handlers. bound is how long a check waits for the projection to reach
// the caller's stream position before answering Unavailable.
func New(st *store.Store, w Waiter, bound time.Duration) *Server {
	return &Server{store: st, wait: w, bound: bound}
}

// Allow is billing's authorization rule: the call's identity must be one of kinds. Billing
// has no users of its own. The superadmin (the operator of the installation) reads and sets
// everything; other services (policy pricing a change, the platform showing usage) read and
// check but never move the license cap. User and job tokens, which the server authenticates
// through policy, are refused by every billing RPC on purpose: usage and the cap are
// installation-wide figures, not a workspace's. docs/billing.md ("Authorization") is the
// table; TestEveryRPCRefusesUserAndJobTokens walks every method, so a new RPC that forgets
// its check fails it.
func Allow(ctx context.Context, kinds ...auth.Kind) error {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return auth.Unauthenticated("missing identity")
	}
	names := make([]string, 0, len(kinds))
	for _, k := range kinds {
		if id.Kind == k {
			return nil
		}
		names = append(names, k.String())
	}
	allowed := strings.Join(names, ",")
	return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED,
		"a "+id.Kind.String()+" token may not call this method: it needs the "+strings.Join(names, " or ")+" token",
		map[string]string{"kind": id.Kind.String(), "allowed": allowed})
}

// Readers may read usage and reports and price changes: the superadmin and the service token.
var Readers = []auth.Kind{auth.Superadmin, auth.Service}

// allowed is the shape of billing's store-backed RPCs: the caller's kind first (Allow, its
// refusal as is), then the store call, whose error errs rewrites.
func allowed[T any](ctx context.Context, kinds []auth.Kind, call func() (T, error)) (T, error) {
	if err := Allow(ctx, kinds...); err != nil {
		var zero T
		return zero, err
	}
	v, err := call()
	if err != nil {
		return v, errs.RewriteError(ctx, err)
	}
	return v, nil
}

// GetSeatUsage implements billingv1.BillingServiceServer.
func (s *Server) GetSeatUsage(ctx context.Context, _ *billingv1.GetSeatUsageRequest) (*billingv1.GetSeatUsageResponse, error) {
	cur, err := allowed(ctx, Readers, func() (store.Current, error) { return s.store.Usage(ctx) })
	if err != nil {
		return nil, err
	}
	return &billingv1.GetSeatUsageResponse{
		Usage: usagePB(cur.Usage), Weights: weightsPB(s.store.Weights()),
		CapSeats: cur.CapSeats, Position: cur.Position,
	}, nil
}

// SetSeatCap implements billingv1.BillingServiceServer.
func (s *Server) SetSeatCap(ctx context.Context, req *billingv1.SetSeatCapRequest) (*billingv1.SetSeatCapResponse, error) {
	c, err := allowed(ctx, []auth.Kind{auth.Superadmin}, func() (int64, error) { return s.store.SetCap(ctx, req.GetSeats()) })
	if err != nil {
		return nil, err
	}
	return &billingv1.SetSeatCapResponse{CapSeats: c}, nil
}

// CheckSeatCap implements billingv1.BillingServiceServer.
func (s *Server) CheckSeatCap(ctx context.Context, req *billingv1.CheckSeatCapRequest) (*billingv1.CheckSeatCapResponse, error) {
	if err := Allow(ctx, Readers...); err != nil {
		return nil, err
	}
	var change seats.Change
	switch c := req.GetChange().(type) {
	case *billingv1.CheckSeatCapRequest_Member:
		m := c.Member
		role := seats.Role("")
		if !m.GetRemoved() {
			role, _ = seats.ParseRole(m.GetRole()) // validated
		}
		change = seats.MemberChange{
			Workspace: m.GetWorkspace(), Username: m.GetUsername(), Email: m.GetEmail(),
			Role: role, Disabled: m.GetDisabled(), Removed: m.GetRemoved(),
		}
	case *billingv1.CheckSeatCapRequest_Builder:
		change = seats.BuilderChange{Workspace: c.Builder.GetWorkspace(), Builder: c.Builder.GetBuilder()}
	}
	p, err := s.price(ctx, change, req.GetMinPosition())
	if err != nil {
		return nil, err
	}
	return &billingv1.CheckSeatCapResponse{
		Before: usagePB(p.Before), After: usagePB(p.After), CapSeats: p.CapSeats,
		DeltaMilliseats: p.Delta(), Allowed: p.Allowed(), Position: p.Position,
	}, nil
}

// CheckSeatCapForOperatorBuilder implements billingv1.BillingServiceServer.
func (s *Server) CheckSeatCapForOperatorBuilder(ctx context.Context, req *billingv1.CheckSeatCapForOperatorBuilderRequest) (*billingv1.CheckSeatCapForOperatorBuilderResponse, error) {
	if err := Allow(ctx, Readers...); err != nil {
		return nil, err
	}
	p, err := s.price(ctx, seats.BuilderChange{Workspace: req.GetWorkspace(), Builder: true}, req.GetMinPosition())
	if err != nil {
		return nil, err
	}
	return &billingv1.CheckSeatCapForOperatorBuilderResponse{
		Before: usagePB(p.Before), After: usagePB(p.After), CapSeats: p.CapSeats,
		DeltaMilliseats: p.Delta(), Allowed: p.Allowed(), Position: p.Position,
	}, nil
}

// price waits until the projection is at least as fresh as the caller's position, then
// counts twice in one snapshot.
func (s *Server) price(ctx context.Context, change seats.Change, minPos int64) (seats.Price, error) {
	if err := s.wait.WaitFor(ctx, minPos, s.bound); err != nil {
		if errors.Is(err, projection.ErrBehind) {
			return seats.Price{}, behind(minPos)
		}
		return seats.Price{}, errs.RewriteError(ctx, err)
	}
	p, err := s.store.Price(ctx, change, minPos)
	switch {
	case errors.Is(err, store.ErrBehind):
		return seats.Price{}, behind(minPos)
	case err != nil:
		return seats.Price{}, errs.RewriteError(ctx, err)
	}
	return p, nil
}

func behind(pos int64) error {
	return errs.New(codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_PROJECTION_BEHIND,
		"billing has not yet applied policy's stream up to the requested position; retry",
		map[string]string{"min_position": strconv.FormatInt(pos, 10)})
}

// ReportUsage implements billingv1.BillingServiceServer.
func (s *Server) ReportUsage(ctx context.Context, _ *billingv1.ReportUsageRequest) (*billingv1.ReportUsageResponse, error) {
	r, err := allowed(ctx, Readers, func() (store.Report, error) { return s.store.WriteReport(ctx) })
	if err != nil {
		return nil, err
	}
	return &billingv1.ReportUsageResponse{Report: reportPB(r)}, nil
}

// ListUsageReports implements billingv1.BillingServiceServer: newest first, keyed by id
// (pkg/paging; reports have no filters, so a token of any other List is refused).
func (s *Server) ListUsageReports(ctx context.Context, req *billingv1.ListUsageReportsRequest) (*billingv1.ListUsageReportsResponse, error) {
	if err := Allow(ctx, Readers...); err != nil {
		return nil, err
	}
	pg, err := paging.Parse(req.GetPageSize(), req.GetPageToken(), reportsFilters, 1)
	if err != nil {
		return nil, err
	}
	var before int64 // 0: from the newest
	if pg.After != nil {
		if before, err = strconv.ParseInt(pg.After[0], 10, 64); err != nil || before <= 0 {
			return nil, errs.InvalidField("page_token", paging.RuleToken, "page_token is not a token this service issued")
		}
	}
	rs, err := s.store.ListReports(ctx, before, pg.Limit())
	if err != nil {
		return nil, errs.RewriteError(ctx, err)
	}
	rs, next := paging.Next(pg, rs, func(r store.Report) []string { return []string{strconv.FormatInt(r.ID, 10)} })
	resp := &billingv1.ListUsageReportsResponse{NextPageToken: next}
	for _, r := range rs {
		resp.Reports = append(resp.Reports, reportPB(r))
	}
	return resp, nil
}

// reportsFilters names ListUsageReports' one query in its page tokens.
const reportsFilters = "usage reports"

// GetUsageReport implements billingv1.BillingServiceServer.
func (s *Server) GetUsageReport(ctx context.Context, req *billingv1.GetUsageReportRequest) (*billingv1.GetUsageReportResponse, error) {
	if err := Allow(ctx, Readers...); err != nil {
		return nil, err
	}
	r, err := s.store.Report(ctx, req.GetId())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errs.New(codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, "no such usage report",
			map[string]string{"kind": "usage_report"})
	case err != nil:
		return nil, errs.RewriteError(ctx, err)
	}
	return &billingv1.GetUsageReportResponse{Report: reportPB(r)}, nil
}

func usagePB(u seats.Usage) *billingv1.SeatUsage {
	return &billingv1.SeatUsage{
		Authors: u.Authors, Operators: u.Operators, Milliseats: u.MilliSeats, Seats: seats.FormatMilli(u.MilliSeats),
	}
}

func weightsPB(w seats.Weights) *billingv1.SeatWeights {
	return &billingv1.SeatWeights{AuthorMilliseats: w.AuthorMilli, OperatorMilliseats: w.OperatorMilli}
}

func reportPB(r store.Report) *billingv1.UsageReport {
	return &billingv1.UsageReport{
		Id: r.ID, ReportDate: r.ReportDate.Format(time.DateOnly), TakenAt: timestamppb.New(r.TakenAt),
		Usage: usagePB(r.Usage), Weights: weightsPB(r.Weights), CapSeats: r.CapSeats, Position: r.Position,
	}
}

// Validators registers the one validator of every billing request.
func Validators(r *validate.Registry) {
	validate.Add(r, func(*billingv1.GetSeatUsageRequest) error { return nil })
	validate.Add(r, func(*billingv1.ReportUsageRequest) error { return nil })
	validate.Add(r, func(m *billingv1.SetSeatCapRequest) error {
		return validate.First(validate.Min("seats", m.GetSeats(), 0), validate.Max("seats", m.GetSeats(), maxCapSeats))
	})
	validate.Add(r, func(m *billingv1.CheckSeatCapRequest) error {
		if err := validate.Min("min_position", m.GetMinPosition(), 0); err != nil {
			return err
		}
		switch c := m.GetChange().(type) {
		case *billingv1.CheckSeatCapRequest_Member:
			mc := c.Member
			if err := validate.First(
				validate.Workspace("member.workspace", mc.GetWorkspace()),
				validate.Username("member.username", mc.GetUsername()),
			); err != nil || mc.GetRemoved() {
				return err
			}
			return validate.First(
				validate.Email("member.email", mc.GetEmail()),
				validate.OneOf("member.role", strings.ToLower(mc.GetRole()), "admin", "developer", "operator"),
			)
		case *billingv1.CheckSeatCapRequest_Builder:
			return validate.Workspace("builder.workspace", c.Builder.GetWorkspace())
		}
		return errs.InvalidField("change", validate.RuleRequired, "one of member or builder is required")
	})
	validate.Add(r, func(m *billingv1.CheckSeatCapForOperatorBuilderRequest) error {
		return validate.First(validate.Workspace("workspace", m.GetWorkspace()), validate.Min("min_position", m.GetMinPosition(), 0))
	})
	// The page token is checked by the handler (paging.Parse), after the caller's kind.
	validate.Add(r, func(m *billingv1.ListUsageReportsRequest) error {
		_, err := paging.Size(m.GetPageSize())
		return err
	})
	validate.Add(r, func(m *billingv1.GetUsageReportRequest) error { return validate.Min("id", m.GetId(), 1) })
}

// maxCapSeats keeps cap x 1000 milli-seats far from int64 overflow.
const maxCapSeats = 1_000_000_000
