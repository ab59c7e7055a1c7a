package app_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/billingclient"
	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/paging"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/billing/internal/app"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
	"github.com/millwright/millwright/services/billing/internal/seats"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	adminToken   = "test-admin-token"
	serviceToken = "test-service-token"
)

type env struct {
	up      *billingtest.Upstream
	admin   billingv1.BillingServiceClient
	service billingv1.BillingServiceClient
	svcConn *grpc.ClientConn
	// adminConn is the superadmin's connection (the audit trail's reader); dsn the database.
	adminConn *grpc.ClientConn
	dsn       string
}

// start runs the real billing server (app.Serve: interceptors, auth, validation, health)
// against a fresh database and the policy stand-in, with the audit flags' defaults.
func start(t *testing.T, bound time.Duration) *env {
	t.Helper()
	return startAudited(t, bound, server.DefaultAudit())
}

// startAudited is start with the audit trail configured as a.
func startAudited(t *testing.T, bound time.Duration, a server.AuditConfig) *env {
	t.Helper()
	up := billingtest.NewUpstream(t)
	dsn := billingtest.NewDB(t)
	cfg := app.Config{
		Config: server.Config{
			Name: "billing", GRPCAddr: "127.0.0.1:0", DatabaseURL: server.DSN(dsn),
			LogLevel: "error", LogFormat: "text", ShutdownTimeout: time.Second,
			AdminToken: adminToken, ServiceToken: serviceToken, Audit: a,
		},
		AuthorWeight: "1", OperatorWeight: "0.5", FreshnessBound: bound,
	}
	policy := up.Conn(t)
	addr, _ := serve(t, cfg, app.Hooks{
		DialPolicy: func(context.Context) (grpc.ClientConnInterface, error) { return policy, nil },
	})
	dial := func(token string) *grpc.ClientConn {
		cc, err := server.Dial(context.Background(), addr, token)
		require.NoError(t, err)
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	sc, ac := dial(serviceToken), dial(adminToken)
	return &env{up: up, admin: billingv1.NewBillingServiceClient(ac),
		service: billingv1.NewBillingServiceClient(sc), svcConn: sc, adminConn: ac, dsn: dsn}
}

// serve runs app.Serve with cfg and hooks until the end of t, when it must return no error,
// and returns the gRPC and metrics addresses it listens on (hooks.OnListen is its own).
func serve(t *testing.T, cfg app.Config, hooks app.Hooks) (grpcAddr, metricsAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	hooks.OnListen = func(g, m string) { addrs <- [2]string{g, m} }
	go func() { done <- app.Serve(ctx, cfg, hooks) }()
	select {
	case a := <-addrs:
		grpcAddr, metricsAddr = a[0], a[1]
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return grpcAddr, metricsAddr
}

func (e *env) head(t *testing.T) int64 {
	h, err := e.up.Head(context.Background())
	require.NoError(t, err)
	return h
}

// model is the seat rule written independently of the SQL, for the agreement test.
type model struct {
	members map[[2]string]struct {
		email, role string
		disabled    bool
	}
	builder map[string]bool
}

func (m model) usage(withBuilder string) (authors, operators int64) {
	author, seen := map[string]bool{}, map[string]bool{}
	for k, v := range m.members {
		if v.disabled {
			continue
		}
		e := v.email
		seen[e] = true
		if v.role != "operator" || m.builder[k[0]] || k[0] == withBuilder {
			author[e] = true
		}
	}
	return int64(len(author)), int64(len(seen) - len(author))
}

func milli(a, o int64) int64 { return a*1000 + o*500 }

// TestShownEnforcedReportedAgree: on random data, the number shown (GetSeatUsage), the
// number enforced (CheckSeatCap's and the builder check's before) and the number reported
// (ReportUsage, ListUsageReports) are the same, equal an independent model, and the builder
// check's after equals the model with that workspace's builder on.
func TestShownEnforcedReportedAgree(t *testing.T) {
	e := start(t, 10*time.Second)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	m := model{members: map[[2]string]struct {
		email, role string
		disabled    bool
	}{}, builder: map[string]bool{}}
	roles := []string{"admin", "developer", "operator", "operator", "operator"}
	for round := range 4 {
		for range 150 {
			ws := fmt.Sprintf("w%d", rng.IntN(12))
			user := fmt.Sprintf("u%d", rng.IntN(80))
			email := fmt.Sprintf("user%d@example.com", rng.IntN(60))
			switch r := rng.IntN(20); {
			case r < 14:
				role, dis := roles[rng.IntN(len(roles))], rng.IntN(6) == 0
				require.NoError(t, e.up.UpsertMember(ctx, ws, user, email, role, dis))
				m.members[[2]string{ws, user}] = struct {
					email, role string
					disabled    bool
				}{email, role, dis}
			case r < 16:
				require.NoError(t, e.up.RemoveMember(ctx, ws, user))
				delete(m.members, [2]string{ws, user})
			default:
				on := rng.IntN(3) == 0
				require.NoError(t, e.up.SetBuilder(ctx, ws, on))
				m.builder[ws] = on
			}
		}
		head := e.head(t)
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			a, o := m.usage("")
			want := &billingv1.SeatUsage{Authors: a, Operators: o, Milliseats: milli(a, o)}

			// Enforced: wait for the projection through the freshness contract first.
			chk, err := e.service.CheckSeatCap(ctx, &billingv1.CheckSeatCapRequest{
				Change:      &billingv1.CheckSeatCapRequest_Builder{Builder: &billingv1.BuilderChange{Workspace: "w0", Builder: m.builder["w0"]}},
				MinPosition: head,
			})
			require.NoError(t, err)
			require.Equal(t, want.Milliseats, chk.GetBefore().GetMilliseats())
			require.Equal(t, chk.GetBefore().GetMilliseats(), chk.GetAfter().GetMilliseats(), "re-saving is a zero delta")

			shown, err := e.service.GetSeatUsage(ctx, &billingv1.GetSeatUsageRequest{})
			require.NoError(t, err)
			require.Equal(t, head, shown.GetPosition())
			reported, err := e.service.ReportUsage(ctx, &billingv1.ReportUsageRequest{})
			require.NoError(t, err)
			listed, err := e.service.ListUsageReports(ctx, &billingv1.ListUsageReportsRequest{PageSize: 1})
			require.NoError(t, err)
			require.Len(t, listed.GetReports(), 1)

			for name, got := range map[string]*billingv1.SeatUsage{
				"shown": shown.GetUsage(), "enforced": chk.GetBefore(),
				"reported": reported.GetReport().GetUsage(), "listed": listed.GetReports()[0].GetUsage(),
			} {
				require.Equal(t, want.Authors, got.GetAuthors(), name)
				require.Equal(t, want.Operators, got.GetOperators(), name)
				require.Equal(t, want.Milliseats, got.GetMilliseats(), name)
			}
			require.Equal(t, int64(500), reported.GetReport().GetWeights().GetOperatorMilliseats())

			for w := range 12 {
				ws := fmt.Sprintf("w%d", w)
				a2, o2 := m.usage(ws)
				p, err := e.service.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: ws, MinPosition: head})
				require.NoError(t, err)
				require.Equal(t, want.Milliseats, p.GetBefore().GetMilliseats(), ws)
				require.Equal(t, milli(a2, o2), p.GetAfter().GetMilliseats(), ws)
				require.Equal(t, milli(a2, o2)-want.Milliseats, p.GetDeltaMilliseats(), ws)
			}
		})
	}
}

// TestCapRefusal: over the cap the builder check says not allowed, and the client policy
// uses (billingclient, its SeatChecker) turns that into FailedPrecondition SEAT_CAP_EXCEEDED
// with before / after / cap, which the gateway maps to 409.
func TestCapRefusal(t *testing.T) {
	e := start(t, 10*time.Second)
	ctx := context.Background()
	// dev@x authors in w1 and is an operator in w2; op1, op2 are operators only in w2 and w3.
	require.NoError(t, e.up.UpsertMember(ctx, "w1", "dev", "dev@x", "developer", false))
	require.NoError(t, e.up.UpsertMember(ctx, "w2", "dev", "dev@x", "operator", false))
	require.NoError(t, e.up.UpsertMember(ctx, "w2", "op1", "op1@x", "operator", false))
	require.NoError(t, e.up.UpsertMember(ctx, "w3", "op2", "op2@x", "operator", false))
	require.NoError(t, e.up.UpsertMember(ctx, "w4", "dev", "dev@x", "operator", false))
	head := e.head(t)
	// usage: dev 1 + op1 0.5 + op2 0.5 = 2 seats.
	_, err := e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 2})
	require.NoError(t, err)

	checker := billingclient.New(e.svcConn)
	t.Run("over the cap is refused with the numbers", func(t *testing.T) {
		p, err := e.service.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "w2", MinPosition: head})
		require.NoError(t, err)
		require.False(t, p.GetAllowed())
		require.Equal(t, "2", p.GetBefore().GetSeats())
		require.Equal(t, "2.5", p.GetAfter().GetSeats())
		require.Equal(t, int64(2), p.GetCapSeats())

		err = checker.CheckBuilderEnable(ctx, "w2", head)
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		reason, ok := errs.Reason(err)
		require.True(t, ok)
		require.Equal(t, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED, reason)
		md := errs.Infos(err)[0].GetMetadata()
		require.Equal(t, map[string]string{"before": "2", "after": "2.5", "cap": "2"}, md)
	})
	t.Run("a workspace of operators who author elsewhere may be enabled at the cap", func(t *testing.T) {
		require.NoError(t, checker.CheckBuilderEnable(ctx, "w4", head))
	})
	t.Run("a member change over the cap is refused", func(t *testing.T) {
		err := checker.CheckMember(ctx, billingclient.MemberChange{Workspace: "w1", Username: "new", Email: "new@x", Role: "developer"}, head)
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		require.Equal(t, "3", errs.Infos(err)[0].GetMetadata()["after"])
		// Demoting frees seats: always allowed.
		require.NoError(t, checker.CheckMember(ctx, billingclient.MemberChange{Workspace: "w1", Username: "dev", Email: "dev@x", Role: "operator"}, head))
	})
	t.Run("enabled, re-enabling is a zero delta even over the cap", func(t *testing.T) {
		_, err := e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 3})
		require.NoError(t, err)
		require.NoError(t, checker.CheckBuilderEnable(ctx, "w2", head))
		require.NoError(t, e.up.SetBuilder(ctx, "w2", true))
		h := e.head(t)
		_, err = e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 1})
		require.NoError(t, err)
		p, err := e.service.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "w2", MinPosition: h})
		require.NoError(t, err)
		require.Equal(t, int64(0), p.GetDeltaMilliseats())
		require.True(t, p.GetAllowed())
		require.NoError(t, checker.CheckBuilderEnable(ctx, "w2", h))
	})
	t.Run("no cap allows anything", func(t *testing.T) {
		_, err := e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 0})
		require.NoError(t, err)
		require.NoError(t, checker.CheckBuilderEnable(ctx, "w3", head))
	})
}

// TestFreshness: a check at a position the projection has not reached fails Unavailable
// PROJECTION_BEHIND after the bound (the stand-in is stopped, so billing cannot catch up), and
// succeeds once the projection has applied it.
func TestFreshness(t *testing.T) {
	e := start(t, 300*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, e.up.UpsertMember(ctx, "w1", "a", "a@x", "operator", false))
	head := e.head(t)
	_, err := e.service.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "w1", MinPosition: head + 1000})
	require.Equal(t, codes.Unavailable, status.Code(err))
	reason, _ := errs.Reason(err)
	require.Equal(t, commonv1.ErrorReason_ERROR_REASON_PROJECTION_BEHIND, reason)
	require.Eventually(t, func() bool {
		p, err := e.service.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "w1", MinPosition: head})
		return err == nil && p.GetDeltaMilliseats() == 500
	}, 10*time.Second, 20*time.Millisecond)
}

func TestRefusals(t *testing.T) {
	e := start(t, time.Second)
	ctx := context.Background()
	tests := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"negative cap", func() error {
			return servicetest.Err(e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: -1}))
		}, codes.InvalidArgument, "seats"},
		{"service may not set the cap", func() error {
			return servicetest.Err(e.service.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 5}))
		}, codes.PermissionDenied, ""},
		{"builder check without workspace", func() error {
			return servicetest.Err(e.service.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{}))
		}, codes.InvalidArgument, "workspace"},
		{"negative position", func() error {
			return servicetest.Err(e.service.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "w", MinPosition: -1}))
		}, codes.InvalidArgument, "min_position"},
		{"check without change", func() error {
			return servicetest.Err(e.service.CheckSeatCap(ctx, &billingv1.CheckSeatCapRequest{}))
		}, codes.InvalidArgument, "change"},
		{"member change with bad role", func() error {
			_, err := e.service.CheckSeatCap(ctx, &billingv1.CheckSeatCapRequest{Change: &billingv1.CheckSeatCapRequest_Member{
				Member: &billingv1.MemberChange{Workspace: "w", Username: "u", Email: "e@x", Role: "owner"}}})
			return err
		}, codes.InvalidArgument, "member.role"},
		{"bad page token", func() error {
			return servicetest.Err(e.service.ListUsageReports(ctx, &billingv1.ListUsageReportsRequest{PageToken: "zzz"}))
		}, codes.InvalidArgument, "page_token"},
		{"page too large", func() error {
			return servicetest.Err(e.service.ListUsageReports(ctx, &billingv1.ListUsageReportsRequest{PageSize: 501}))
		}, codes.InvalidArgument, "page_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Equal(t, tt.code, status.Code(err), "%v", err)
			if tt.field != "" {
				require.Equal(t, tt.field, errs.Infos(err)[0].GetMetadata()["field"])
			}
		})
	}
	t.Run("no token", func(t *testing.T) {
		cc, err := server.Dial(ctx, strings.TrimPrefix(e.svcConn.Target(), "dns:///"), "")
		require.NoError(t, err)
		defer cc.Close()
		_, err = billingv1.NewBillingServiceClient(cc).GetSeatUsage(ctx, &billingv1.GetSeatUsageRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	})
}

func TestEveryRequestHasAValidator(t *testing.T) {
	require.Empty(t, app.Validators().Missing(billingv1.BillingService_ServiceDesc, billingv1.EventService_ServiceDesc))
}

func TestWeightsFlag(t *testing.T) {
	tests := []struct {
		author, operator string
		want             seats.Weights
		wantErr          bool
	}{
		{author: "1", operator: "0.5", want: seats.DefaultWeights},
		{author: "1", operator: "0", want: seats.Weights{AuthorMilli: 1000}},
		{author: "2", operator: "0.25", want: seats.Weights{AuthorMilli: 2000, OperatorMilli: 250}},
		{author: "1", operator: "2", wantErr: true},
		{author: "0", operator: "0", wantErr: true},
		{author: "1", operator: "0.1234", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.author+"/"+tt.operator, func(t *testing.T) {
			cfg := app.Config{AuthorWeight: tt.author, OperatorWeight: tt.operator}
			w, err := cfg.Weights()
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, w)
		})
	}
}

// TestReportReadBack: usage reports read back one by one (GetUsageReport) and page by page
// (ListUsageReports, pkg/paging), newest first, at every page size; an empty list has no
// next page; tokens are refused when malformed or issued for another query.
func TestReportReadBack(t *testing.T) {
	e := start(t, time.Second)
	ctx := context.Background()
	empty, err := e.service.ListUsageReports(ctx, &billingv1.ListUsageReportsRequest{})
	require.NoError(t, err)
	require.Empty(t, empty.GetReports(), "no report yet")
	require.Empty(t, empty.GetNextPageToken(), "an empty list has no next page")

	var ids []int64
	for range 5 {
		r, err := e.service.ReportUsage(ctx, &billingv1.ReportUsageRequest{})
		require.NoError(t, err)
		ids = append(ids, r.GetReport().GetId())
		require.Equal(t, time.Now().UTC().Format(time.DateOnly), r.GetReport().GetReportDate())
		got, err := e.admin.GetUsageReport(ctx, &billingv1.GetUsageReportRequest{Id: r.GetReport().GetId()})
		require.NoError(t, err)
		require.True(t, proto.Equal(r.GetReport(), got.GetReport()), "Get answers what ReportUsage wrote")
	}
	newestFirst := []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}
	for _, tc := range []struct {
		size  int32
		pages int
	}{{1, 5}, {2, 3}, {5, 1}, {0, 1}} {
		t.Run(fmt.Sprintf("page_size %d", tc.size), func(t *testing.T) {
			var got []int64
			token, pages := "", 0
			for {
				page, err := e.service.ListUsageReports(ctx, &billingv1.ListUsageReportsRequest{PageSize: tc.size, PageToken: token})
				require.NoError(t, err)
				pages++
				for _, r := range page.GetReports() {
					got = append(got, r.GetId())
				}
				if token = page.GetNextPageToken(); token == "" {
					break
				}
			}
			require.Equal(t, newestFirst, got)
			require.Equal(t, tc.pages, pages)
		})
	}
	t.Run("refused tokens and ids", func(t *testing.T) {
		for name, req := range map[string]*billingv1.ListUsageReportsRequest{
			"not a token":                   {PageToken: "zzz"},
			"a token of another List":       {PageToken: paging.Encode(`roles cluster="c" enabled=any prefix=""`, "r")},
			"the old before:<id> format":    {PageToken: "YmVmb3JlOjM"},
			"a key that is not a report id": {PageToken: paging.Encode("usage reports", "x")},
		} {
			_, err := e.service.ListUsageReports(ctx, req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), name)
			require.Equal(t, "page_token", errs.Infos(err)[0].GetMetadata()["field"], name)
		}
		_, err := e.service.GetUsageReport(ctx, &billingv1.GetUsageReportRequest{Id: ids[4] + 1000})
		require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
		reason, _ := errs.Reason(err)
		require.Equal(t, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, reason)
		_, err = e.service.GetUsageReport(ctx, &billingv1.GetUsageReportRequest{})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Equal(t, "id", errs.Infos(err)[0].GetMetadata()["field"])
	})
}
