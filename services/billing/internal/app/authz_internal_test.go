package app

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
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
	services := []struct {
		desc grpc.ServiceDesc
		srv  any
	}{
		{billingv1.BillingService_ServiceDesc, api.New(nil, nil, 0)},
		{billingv1.EventService_ServiceDesc, &events{}},
	}
	// allowed is the rule of each method; a method missing here fails the test.
	allowed := map[string]string{
		billingv1.BillingService_GetSeatUsage_FullMethodName:                   "superadmin,service",
		billingv1.BillingService_SetSeatCap_FullMethodName:                     "superadmin",
		billingv1.BillingService_CheckSeatCap_FullMethodName:                   "superadmin,service",
		billingv1.BillingService_CheckSeatCapForOperatorBuilder_FullMethodName: "superadmin,service",
		billingv1.BillingService_ReportUsage_FullMethodName:                    "superadmin,service",
		billingv1.BillingService_ListUsageReports_FullMethodName:               "superadmin,service",
		billingv1.EventService_Watch_FullMethodName:                            "superadmin,service",
	}
	ids := []auth.Identity{
		{Kind: auth.User, Workspace: "acme", Username: "boss", Scopes: []string{auth.ScopeAll}, TokenID: "t1"},
		{Kind: auth.Job, Workspace: "acme", Username: "boss", JobID: "j1", TokenID: "t2"},
		{Kind: auth.Service, Username: "service", Scopes: []string{auth.ScopeAll}, TokenID: "static:service"},
	}
	seen := map[string]bool{}
	for _, s := range services {
		calls := map[string]func(ctx context.Context) error{}
		for _, md := range s.desc.Methods {
			calls["/"+s.desc.ServiceName+"/"+md.MethodName] = func(ctx context.Context) error {
				_, err := md.Handler(s.srv, ctx, func(any) error { return nil }, nil)
				return err
			}
		}
		for _, sd := range s.desc.Streams {
			calls["/"+s.desc.ServiceName+"/"+sd.StreamName] = func(ctx context.Context) error {
				return sd.Handler(s.srv, emptyStream{ctx})
			}
		}
		for method, call := range calls {
			seen[method] = true
			rule, ok := allowed[method]
			require.True(t, ok, "%s has no rule in this test", method)
			for _, id := range ids {
				if id.Kind == auth.Service && rule != "superadmin" {
					continue // allowed: it would reach the nil store
				}
				t.Run(id.Kind.String()+" "+method, func(t *testing.T) {
					err := guarded(t, func() error { return call(auth.WithIdentity(context.Background(), id)) })
					require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
					reason, _ := errs.Reason(err)
					require.Equal(t, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, reason)
					require.Equal(t, map[string]string{"kind": id.Kind.String(), "allowed": rule}, errs.Infos(err)[0].GetMetadata())
				})
			}
			t.Run("no identity "+method, func(t *testing.T) {
				err := guarded(t, func() error { return call(context.Background()) })
				require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			})
		}
	}
	require.Len(t, seen, len(allowed), "every rule names a served method")
}

func guarded(t *testing.T, call func() error) error {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("handler went past its authorization check: %v", r)
		}
	}()
	return call()
}

// emptyStream is a server stream whose one request is the empty message.
type emptyStream struct{ ctx context.Context }

func (s emptyStream) SetHeader(metadata.MD) error  { return nil }
func (s emptyStream) SendHeader(metadata.MD) error { return nil }
func (s emptyStream) SetTrailer(metadata.MD)       {}
func (s emptyStream) Context() context.Context     { return s.ctx }
func (s emptyStream) SendMsg(any) error            { return errors.New("handler sent a message") }
func (s emptyStream) RecvMsg(any) error            { return nil }
