package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	"github.com/millwright/millwright/pkg/server/reqctx"
	"github.com/millwright/millwright/pkg/validate"
)

// chain holds what the interceptors need. Its steps, outermost first, are fixed: recovery
// must see panics from every later step; request id must exist before anything logs; logging
// and metrics must see refusals by auth and validation; auth runs before validation so an
// anonymous caller learns nothing about what a valid request looks like; rewrite sits
// directly around the handler so every outer step sees the final status code. The audit
// step (when there is a trail) sits between auth and validation: it knows the actor, and it
// records bad input as a refusal.
type chain struct {
	logger    *slog.Logger
	metrics   *metrics
	authn     auth.Authenticator
	public    map[string]bool
	validator *validate.Registry
	draining  context.Context    // cancelled when shutdown begins; ends open streams
	audit     *audit.Interceptor // nil: no audit trail
}

func (c *chain) unary() []grpc.UnaryServerInterceptor {
	steps := []grpc.UnaryServerInterceptor{
		c.recoveryUnary, c.requestIDUnary, c.loggingUnary, c.metricsUnary, c.authUnary,
	}
	if c.audit != nil {
		steps = append(steps, c.auditUnary)
	}
	return append(steps, c.validationUnary, c.rewriteUnary)
}

func (c *chain) stream() []grpc.StreamServerInterceptor {
	steps := []grpc.StreamServerInterceptor{
		c.recoveryStream, c.requestIDStream, c.loggingStream, c.metricsStream, c.authStream,
	}
	if c.audit != nil {
		steps = append(steps, c.audit.Stream)
	}
	return append(steps, c.validationStream, c.rewriteStream)
}

// auditUnary leaves health and reflection out of the trail: they decide nothing.
func (c *chain) auditUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if infra(info.FullMethod) {
		return h(ctx, req)
	}
	return c.audit.Unary(ctx, req, info, h)
}

// wrapped replaces a stream's context and optionally checks each received message.
type wrapped struct {
	grpc.ServerStream
	ctx   context.Context
	check func(m any) error
}

func (w *wrapped) Context() context.Context { return w.ctx }

func (w *wrapped) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if w.check != nil {
		return w.check(m)
	}
	return nil
}

// infra reports methods of grpc.health.v1 and reflection: public, and not ours to validate.
func infra(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.")
}

// --- recovery ---------------------------------------------------------------------------

func (c *chain) recoveryUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	ctx, call := reqctx.Start(ctx)
	defer func() {
		if r := recover(); r != nil {
			err = c.panicked(ctx, call, info.FullMethod, r)
		}
	}()
	return h(ctx, req)
}

func (c *chain) recoveryStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	ctx, call := reqctx.Start(ss.Context())
	defer func() {
		if r := recover(); r != nil {
			err = c.panicked(ctx, call, info.FullMethod, r)
		}
	}()
	return h(srv, &wrapped{ServerStream: ss, ctx: ctx})
}

// panicked logs the panic with its stack and the request id the inner step recorded in the
// shared Call (recovery runs before that step, so the id is not in its own context).
func (c *chain) panicked(ctx context.Context, call *reqctx.Call, method string, r any) error {
	id := call.RequestID()
	c.metrics.panics.WithLabelValues(method).Inc()
	c.logger.ErrorContext(ctx, "panic", "method", method, "request_id", id,
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	msg := "internal error"
	if id != "" {
		msg += " (request id " + id + ")"
	}
	return status.Error(codes.Internal, msg)
}

// --- request id -------------------------------------------------------------------------

// withRequestID adopts the caller's x-request-id when it is well-formed (so a trace through
// the gateway and several services shares one id) and makes one up otherwise.
func (c *chain) withRequestID(ctx context.Context) (context.Context, string) {
	md, _ := metadata.FromIncomingContext(ctx)
	id := ""
	if v := md.Get(reqctx.MetadataKey); len(v) > 0 && reqctx.ValidID(v[0]) {
		id = v[0]
	} else {
		id = reqctx.NewID()
	}
	ctx = reqctx.WithRequestID(ctx, id)
	return reqctx.WithLogger(ctx, c.logger.With("request_id", id)), id
}

func (c *chain) requestIDUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, id := c.withRequestID(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs(reqctx.MetadataKey, id)) // fails only if headers were sent
	return h(ctx, req)
}

func (c *chain) requestIDStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, id := c.withRequestID(ss.Context())
	_ = ss.SetHeader(metadata.Pairs(reqctx.MetadataKey, id))
	return h(srv, &wrapped{ServerStream: ss, ctx: ctx})
}

// --- logging ----------------------------------------------------------------------------

// logCall writes one line per call. It never logs request bodies or metadata: tokens travel
// in metadata and bodies may carry credentials.
func (c *chain) logCall(ctx context.Context, method string, start time.Time, err error) {
	st := status.Convert(err)
	level := slog.LevelInfo
	switch st.Code() {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		level = slog.LevelError
	case codes.Unavailable, codes.ResourceExhausted:
		level = slog.LevelWarn
	default: // an answer (OK or a refusal): info
	}
	if infra(method) && level == slog.LevelInfo {
		level = slog.LevelDebug // probes every few seconds would drown the rest
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.String("code", st.Code().String()),
		slog.Duration("duration", time.Since(start)),
	}
	if reason, ok := errs.Reason(err); ok {
		attrs = append(attrs, slog.String("reason", reason.String()))
	}
	if err != nil {
		attrs = append(attrs, slog.String("message", st.Message()))
	}
	attrs = append(attrs, reqctx.FromContext(ctx).Attrs()...)
	reqctx.Logger(ctx).LogAttrs(ctx, level, "rpc", attrs...)
}

func (c *chain) loggingUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	c.logCall(ctx, info.FullMethod, start, err)
	return resp, err
}

func (c *chain) loggingStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	c.logCall(ss.Context(), info.FullMethod, start, err)
	return err
}

// --- metrics ----------------------------------------------------------------------------

func (c *chain) count(method string, err error) {
	c.metrics.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	if reason, ok := errs.Reason(err); ok {
		c.metrics.refusals.WithLabelValues(method, reason.String()).Inc()
	}
}

func (c *chain) metricsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	c.metrics.latency.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	c.count(info.FullMethod, err)
	return resp, err
}

func (c *chain) metricsStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	err := h(srv, ss)
	c.count(info.FullMethod, err)
	return err
}

// --- auth -------------------------------------------------------------------------------

func (c *chain) authenticate(ctx context.Context, method string) (context.Context, error) {
	if infra(method) || c.public[method] {
		return ctx, nil
	}
	token, err := auth.BearerToken(ctx)
	if err != nil {
		return nil, err
	}
	id, err := c.authn.Authenticate(ctx, token)
	switch {
	case errors.Is(err, auth.ErrUnknownToken):
		return nil, auth.Unauthenticated("unknown token")
	case err != nil:
		// A refusal (a status) stands; a failure to decide (database down) is rewritten to
		// Unavailable and friends, never reported as a bad token.
		return nil, errs.RewriteError(ctx, err)
	case id.Kind == 0:
		return nil, auth.Unauthenticated("token has no identity") // fail closed on a buggy Authenticator
	}
	reqctx.Annotate(ctx, slog.String("identity_kind", id.Kind.String()), slog.String("workspace", id.Workspace))
	return auth.WithIdentity(ctx, id), nil
}

func (c *chain) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := c.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (c *chain) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := c.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return h(srv, &wrapped{ServerStream: ss, ctx: ctx})
}

// --- validation -------------------------------------------------------------------------

func (c *chain) validationUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !infra(info.FullMethod) {
		if err := c.validator.Validate(req); err != nil {
			return nil, err
		}
	}
	return h(ctx, req)
}

// validationStream checks every message the handler receives; for a server-streaming RPC
// that is its one request, read before the handler does anything.
func (c *chain) validationStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if infra(info.FullMethod) {
		return h(srv, ss)
	}
	return h(srv, &wrapped{ServerStream: ss, ctx: ss.Context(), check: c.validator.Validate})
}

// --- rewrite (and drain) ----------------------------------------------------------------

func (c *chain) rewriteUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		return nil, errs.RewriteError(ctx, err)
	}
	return resp, nil
}

// rewriteStream also ends the stream when shutdown begins. Server-streaming calls (Watch,
// health Watch) never finish on their own, so without this GracefulStop would always wait the
// whole shutdown timeout; they end with Unavailable, which tells the consumer to reconnect
// (to another replica) and resume.
func (c *chain) rewriteStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	parent := ss.Context()
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stop := context.AfterFunc(c.draining, cancel)
	defer stop()
	err := errs.RewriteError(ctx, h(srv, &wrapped{ServerStream: ss, ctx: ctx}))
	if c.draining.Err() != nil && parent.Err() == nil && (err == nil || status.Code(err) == codes.Canceled) {
		return errs.Unavailable("server", "server shutting down; reconnect and resume")
	}
	return err
}
