package server

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	"github.com/millwright/millwright/pkg/server/reqctx"
)

// Dial returns a client for another millwright service: plaintext (services talk over
// loopback or a mesh that adds TLS), the bearer token on every call (none if token is ""),
// tracing, the caller's request id forwarded, and keepalive pings so a dead peer is noticed
// in seconds rather than at the next call's deadline. The connection is lazy (grpc.NewClient):
// it connects on first use, so services can start in any order. ctx is reserved for future
// use (e.g. a blocking readiness wait) and is not retained.
//
// A peer that is down or not yet up is waited for rather than failed fast: grpc-go fails a
// call at once, with the last dial error, while the channel sits out a reconnect backoff that
// grows to two minutes by default. A service that started a second before the one it calls
// would then refuse its callers long after the peer came up. So the backoff stays short
// (ReconnectBackoff) and a unary call waits for the connection up to UpstreamWait (or its own
// deadline, if sooner) before it is answered Unavailable.
func Dial(_ context.Context, addr string, token string) (*grpc.ClientConn, error) {
	opts := append(ClientOptions(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(propagator))),
		grpc.WithChainUnaryInterceptor(requestIDUnaryClient),
		grpc.WithChainStreamInterceptor(requestIDStreamClient),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
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

// UpstreamWait bounds how long a unary call to another service waits for a connection.
const UpstreamWait = 5 * time.Second

// ReconnectBackoff is the reconnect schedule of every connection to a millwright service.
var ReconnectBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}

// ClientOptions are the options every connection between millwright processes shares
// (services and the gateway): plaintext, a short reconnect backoff, and unary calls that wait
// for a connection for a bounded time (see Dial).
func ClientOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: ReconnectBackoff, MinConnectTimeout: 5 * time.Second}),
		grpc.WithChainUnaryInterceptor(waitForUpstream),
	}
}

// waitForUpstream makes a unary call wait for a connection (WaitForReady) for at most
// UpstreamWait. If that bound, not the caller's deadline, ends the wait, the answer is
// Unavailable (which clients retry), not DeadlineExceeded.
func waitForUpstream(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	wctx, cancel := context.WithTimeout(ctx, UpstreamWait)
	defer cancel()
	err := invoker(wctx, method, req, reply, cc, append([]grpc.CallOption{grpc.WaitForReady(true)}, opts...)...)
	if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil && wctx.Err() != nil {
		return errs.Unavailable(cc.Target(), fmt.Sprintf("%s: no answer within %s (%v)", cc.Target(), UpstreamWait, status.Convert(err).Message()))
	}
	return err
}

func requestIDUnaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(forwardRequestID(ctx), method, req, reply, cc, opts...)
}

func requestIDStreamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(forwardRequestID(ctx), desc, cc, method, opts...)
}
