package app

import (
	"context"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/billing/internal/api"
)

// TestEveryRPCRefusesUserAndJobTokens calls the handler of every method of both billing
// services, as Serve registers them (walked from the service descriptors, so a new RPC is
// included without editing this test), with a user identity and a job identity, as the
// server's authenticator now produces them from policy's tokens: each must answer
// PermissionDenied ROLE_NOT_ALLOWED naming the token kind, before touching anything (store,
// projection and stream are nil: a handler that gets past its check panics). It also pins
// which static token each method accepts.
func TestEveryRPCRefusesUserAndJobTokens(t *testing.T) {
	calls := servicetest.Handlers(api.New(nil, nil, 0), billingv1.BillingService_ServiceDesc)
	maps.Copy(calls, servicetest.Handlers(&events{}, billingv1.EventService_ServiceDesc))
	// allowed is the rule of each method; a method missing here fails the test.
	allowed := map[string]string{
		billingv1.BillingService_GetSeatUsage_FullMethodName:                   "superadmin,service",
		billingv1.BillingService_SetSeatCap_FullMethodName:                     "superadmin",
		billingv1.BillingService_CheckSeatCap_FullMethodName:                   "superadmin,service",
		billingv1.BillingService_CheckSeatCapForOperatorBuilder_FullMethodName: "superadmin,service",
		billingv1.BillingService_ReportUsage_FullMethodName:                    "superadmin,service",
		billingv1.BillingService_ListUsageReports_FullMethodName:               "superadmin,service",
		billingv1.BillingService_GetUsageReport_FullMethodName:                 "superadmin,service",
		billingv1.EventService_Watch_FullMethodName:                            "superadmin,service",
	}
	ids := []auth.Identity{
		{Kind: auth.User, Workspace: "acme", Username: "boss", Scopes: []string{auth.ScopeAll}, TokenID: "t1"},
		{Kind: auth.Job, Workspace: "acme", Username: "boss", JobID: "j1", TokenID: "t2"},
		{Kind: auth.Service, Username: "service", Scopes: []string{auth.ScopeAll}, TokenID: "static:service"},
	}
	for method, call := range calls {
		rule, ok := allowed[method]
		require.True(t, ok, "%s has no rule in this test", method)
		for _, id := range ids {
			if id.Kind == auth.Service && rule != "superadmin" {
				continue // allowed: it would reach the nil store
			}
			t.Run(id.Kind.String()+" "+method, func(t *testing.T) {
				servicetest.RequireNotAllowed(t, call(t, auth.WithIdentity(context.Background(), id)), id.Kind, rule)
			})
		}
		t.Run("no identity "+method, func(t *testing.T) {
			err := call(t, context.Background())
			require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
		})
	}
	require.Len(t, calls, len(allowed), "every rule names a served method")
}
