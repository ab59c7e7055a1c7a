package server

import (
	"context"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/server/reqctx"
)

// Dial returns a client for another millwright service: plaintext (services talk over
// loopback or a mesh that adds TLS), the bearer token on every call (none if token is ""),
// tracing, the caller's request id forwarded, and keepalive pings so a dead peer is noticed
// in seconds rather than at the next call's deadline. The connection is lazy (grpc.NewClient):
// it connects on first use, so services can start in any order. ctx is reserved for future
// use (e.g. a blocking readiness wait) and is not retained.
func Dial(_ context.Context, addr string, token string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(propagator))),
		grpc.WithChainUnaryInterceptor(requestIDUnaryClient),
		grpc.WithChainStreamInterceptor(requestIDStreamClient),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.PerRPC(token)))
	}
	return grpc.NewClient(addr, opts...)
}

// forwardRequestID puts the current call's request id on the outgoing call, unless the
// caller already set one, so one id follows a request through every service.
func forwardRequestID(ctx context.Context) context.Context {
	id := reqctx.RequestID(ctx)
	if id == "" {
		return ctx
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(reqctx.MetadataKey)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, reqctx.MetadataKey, id)
}

func requestIDUnaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(forwardRequestID(ctx), method, req, reply, cc, opts...)
}

func requestIDStreamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(forwardRequestID(ctx), desc, cc, method, opts...)
}
