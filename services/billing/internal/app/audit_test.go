package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/audit/audittest"
	"github.com/millwright/millwright/pkg/errs"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/billing/internal/api"
	"github.com/millwright/millwright/services/billing/internal/app"
)

// Every RPC billing serves (app.Register's services and the AuditService pkg/server adds) is
// recorded or left out with a reason, and no secret-looking field is recorded in clear.
func TestAuditRulesComplete(t *testing.T) {
	services := append(audittest.Services(app.Register(api.New(nil, nil, 0), nil)), auditv1.AuditService_ServiceDesc.ServiceName)
	audittest.Complete(t, api.AuditRules(), services...)
	audittest.Redacted(t, services...)
}

// auditedEnv runs billing with every decision its own event and failOpen.
func auditedEnv(t *testing.T, failOpen string) *env {
	t.Helper()
	return startAudited(t, time.Second, server.AuditConfig{Window: -1, FailOpen: failOpen})
}

func (e *env) trail(t *testing.T, req *auditv1.ListAuditEventsRequest) []*auditv1.AuditEvent {
	t.Helper()
	return servicetest.AuditEvents(t, context.Background(), auditv1.NewAuditServiceClient(e.adminConn), req)
}

func seatCheck(ctx context.Context, e *env) error {
	return servicetest.Err(e.service.CheckSeatCap(ctx, &billingv1.CheckSeatCapRequest{Change: &billingv1.CheckSeatCapRequest_Member{
		Member: &billingv1.MemberChange{Workspace: "w", Username: "u", Email: "u@x", Role: "developer"}}}))
}

// A cap change leaves "requested" then "granted" (settings), a seat check its decision (seats).
func TestAuditRecordsSeatDecisions(t *testing.T) {
	e := auditedEnv(t, server.DefaultAuditFailOpen)
	ctx := context.Background()
	_, err := e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 7})
	require.NoError(t, err)
	require.NoError(t, seatCheck(ctx, e))

	caps := e.trail(t, &auditv1.ListAuditEventsRequest{Rpc: billingv1.BillingService_SetSeatCap_FullMethodName})
	require.Len(t, caps, 2)
	for i, outcome := range []string{"requested", "granted"} {
		require.Equal(t, outcome, caps[i].GetOutcome())
		require.Equal(t, "settings", caps[i].GetClass())
		require.Equal(t, "superadmin", caps[i].GetActorKind())
		require.Equal(t, "7", caps[i].GetDetails()["seats"])
		require.Equal(t, "billing", caps[i].GetService())
	}
	checks := e.trail(t, &auditv1.ListAuditEventsRequest{Class: "seats"})
	require.Len(t, checks, 1)
	require.Equal(t, billingv1.BillingService_CheckSeatCap_FullMethodName, checks[0].GetRpc())
	require.Equal(t, "granted", checks[0].GetOutcome())
	require.Equal(t, "service", checks[0].GetActorKind())
}

// When the trail cannot be written, a cap change is refused and not made (settings fail
// closed), while a seat check still answers (seats fail open by default); with settings
// failing open the change is made.
func TestAuditFailsClosed(t *testing.T) {
	ctx := context.Background()
	capOf := func(e *env) int64 {
		u, err := e.admin.GetSeatUsage(ctx, &billingv1.GetSeatUsageRequest{})
		require.NoError(t, err)
		return u.GetCapSeats()
	}
	for _, tc := range []struct {
		failOpen string
		want     int64 // the cap after SetSeatCap(9), from 5
	}{
		{server.DefaultAuditFailOpen, 5},
		{server.DefaultAuditFailOpen + ",settings", 9},
	} {
		t.Run(tc.failOpen, func(t *testing.T) {
			e := auditedEnv(t, tc.failOpen)
			_, err := e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 5})
			require.NoError(t, err)
			servicetest.BreakAudit(t, e.dsn)

			_, err = e.admin.SetSeatCap(ctx, &billingv1.SetSeatCapRequest{Seats: 9})
			if tc.want == 5 {
				require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
				reason, _ := errs.Reason(err)
				require.Equal(t, commonv1.ErrorReason_ERROR_REASON_AUDIT_UNAVAILABLE, reason)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, capOf(e))
			require.NoError(t, seatCheck(ctx, e), "the seat check fails open")
		})
	}
}
