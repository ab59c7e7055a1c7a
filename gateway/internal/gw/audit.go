package gw

import (
	"context"

	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/errs"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
)

// auditRouter is the AuditService client behind /v1/audit/{service}/...: every service serves
// AuditService for its own trail, so the route's service names the upstream.
type auditRouter map[string]*grpc.ClientConn

func (a auditRouter) client(service string) (auditv1.AuditServiceClient, error) {
	c, ok := a[service]
	if !ok {
		return nil, errs.InvalidField("service", "one_of", `service must be "policy", "roleset" or "billing"`)
	}
	return auditv1.NewAuditServiceClient(c), nil
}

func (a auditRouter) ListAuditEvents(ctx context.Context, in *auditv1.ListAuditEventsRequest, opts ...grpc.CallOption) (*auditv1.ListAuditEventsResponse, error) {
	c, err := a.client(in.GetService())
	if err != nil {
		return nil, err
	}
	return c.ListAuditEvents(ctx, in, opts...)
}

func (a auditRouter) WatchAuditEvents(ctx context.Context, in *auditv1.WatchAuditEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[auditv1.WatchAuditEventsResponse], error) {
	c, err := a.client(in.GetService())
	if err != nil {
		return nil, err
	}
	return c.WatchAuditEvents(ctx, in, opts...)
}

func (a auditRouter) HashAuditValue(ctx context.Context, in *auditv1.HashAuditValueRequest, opts ...grpc.CallOption) (*auditv1.HashAuditValueResponse, error) {
	c, err := a.client(in.GetService())
	if err != nil {
		return nil, err
	}
	return c.HashAuditValue(ctx, in, opts...)
}

func (a auditRouter) VerifyAuditChain(ctx context.Context, in *auditv1.VerifyAuditChainRequest, opts ...grpc.CallOption) (*auditv1.VerifyAuditChainResponse, error) {
	c, err := a.client(in.GetService())
	if err != nil {
		return nil, err
	}
	return c.VerifyAuditChain(ctx, in, opts...)
}
