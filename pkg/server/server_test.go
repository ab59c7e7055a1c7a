package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/server/reqctx"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/pkg/validate"
)

// TestMain runs pgtest's throw-away Postgres for the database tests; goroutine leaks are
// checked per test instead (see start), since pgtest.Main owns the exit.
func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	adminToken  = "admin-token-value"
	policyWatch = "/millwright.policy.v1.EventService/Watch"
	unaryCall   = "/grpc.testing.TestService/UnaryCall"
	emptyCall   = "/grpc.testing.TestService/EmptyCall"
)

// events is a trivial policy EventService: the first kind of the request picks a behaviour.
type events struct {
	policyv1.UnimplementedEventServiceServer
}

func (events) Watch(req *policyv1.WatchRequest, s grpc.ServerStreamingServer[policyv1.WatchResponse]) error {
	switch first(req.GetKinds()) {
	case "panic":
		panic("boom in watch")
	case "block": // like a real Watch: one event, then follow until the stream ends
		if err := s.Send(&policyv1.WatchResponse{HeadId: 1}); err != nil {
			return err
		}
		<-s.Context().Done()
		return s.Context().Err()
	}
	id, _ := auth.FromContext(s.Context())
	return s.Send(&policyv1.WatchResponse{HeadId: req.GetAfterId(), Event: &commonv1.Event{Key: id.Username}})
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// unary is grpc-go's generated interop TestService, used for unary calls (the policy
// EventService has only a streaming method). ResponseSize picks a behaviour.
type unary struct {
	testgrpc.UnimplementedTestServiceServer
	release chan struct{}
}

func (u *unary) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (u *unary) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	switch req.GetResponseSize() {
	case 1:
		panic("boom in unary")
	case 2:
		return nil, errors.New("SELECT password_hash FROM tokens failed")
	case 3:
		time.Sleep(300 * time.Millisecond)
	case 4:
		<-u.release // ignores its context: only Stop ends the call
	}
	id, _ := auth.FromContext(ctx)
	return &testgrpc.SimpleResponse{Username: id.Username}, nil
}

type env struct {
	grpcAddr, metricsAddr string
	logs                  *servicetest.LogBuffer
	conn                  *grpc.ClientConn
	validations           *atomic.Int64
	unary                 *unary
	cancel                context.CancelFunc
	done                  chan error
}

type setup struct {
	cfg  *server.Config
	opts *server.Options
}

// start runs a real server on 127.0.0.1:0 and dials it with a real client (no token: tests
// add it per call). It is stopped at the end of the test.
func start(t *testing.T, customize ...func(setup)) *env {
	t.Helper()
	// Registered first, so it runs after every other cleanup has stopped the server.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	e := &env{logs: &servicetest.LogBuffer{}, validations: &atomic.Int64{}, unary: &unary{release: make(chan struct{})}, done: make(chan error, 1)}
	reg := validate.NewRegistry()
	validate.Add(reg, func(r *policyv1.WatchRequest) error {
		e.validations.Add(1)
		return validate.First(
			validate.Min("after_id", r.GetAfterId(), -1),
			validate.Each("kinds", r.GetKinds(), func(f, k string) error { return validate.Required(f, k) }))
	})
	validate.Add(reg, func(r *testgrpc.SimpleRequest) error {
		e.validations.Add(1)
		return validate.Min("response_size", r.GetResponseSize(), 0)
	})
	validate.Add(reg, func(*testgrpc.Empty) error { return nil })
	require.Empty(t, reg.Missing(policyv1.EventService_ServiceDesc))

	cfg := server.Config{Name: "test", GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}
	listening := make(chan struct{})
	opts := server.Options{
		Authenticator: auth.Static{AdminToken: adminToken},
		Public:        []string{emptyCall},
		Validator:     reg,
		Register: func(s *grpc.Server) {
			policyv1.RegisterEventServiceServer(s, events{})
			testgrpc.RegisterTestServiceServer(s, e.unary)
		},
		Logger: slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnListen: func(g, m string) {
			e.grpcAddr, e.metricsAddr = g, m
			close(listening)
		},
		HealthInterval: 50 * time.Millisecond,
	}
	for _, c := range customize {
		c(setup{&cfg, &opts})
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- server.Run(ctx, cfg, opts) }()
	select {
	case <-listening:
	case err := <-e.done:
		t.Fatalf("Run returned before listening: %v", err)
	}
	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	e.conn = conn
	t.Cleanup(func() {
		_ = e.stop(t)
		select {
		case <-e.unary.release:
		default:
			close(e.unary.release)
		}
	})
	return e
}

// stop cancels Run and returns its result (idempotent).
func (e *env) stop(t *testing.T) error {
	t.Helper()
	e.cancel()
	defer func() {
		if e.conn != nil {
			e.conn.Close()
			e.conn = nil
		}
	}()
	select {
	case err, ok := <-e.done:
		if ok {
			close(e.done)
			return err
		}
		return nil
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func withToken(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// watch opens a Watch stream and returns the first message or the error.
func (e *env) watch(ctx context.Context, req *policyv1.WatchRequest) (*policyv1.WatchResponse, error) {
	s, err := policyv1.NewEventServiceClient(e.conn).Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.Recv()
}

func requireReason(t *testing.T, err error, code codes.Code, reason commonv1.ErrorReason) {
	t.Helper()
	require.Equal(t, code, status.Code(err), "%v", err)
	got, ok := errs.Reason(err)
	require.True(t, ok, "ErrorInfo in %v", err)
	require.Equal(t, reason, got)
}

func (e *env) metrics(t *testing.T) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + e.metricsAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func (e *env) healthz(t *testing.T) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + e.metricsAddr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestAuthenticatedCallsReachHandler(t *testing.T) {
	e := start(t)
	ctx := testCtx(t)

	resp, err := testgrpc.NewTestServiceClient(e.conn).UnaryCall(withToken(ctx), &testgrpc.SimpleRequest{})
	require.NoError(t, err)
	assert.Equal(t, "superadmin", resp.GetUsername(), "handler sees the identity")

	msg, err := e.watch(withToken(ctx), &policyv1.WatchRequest{AfterId: 7})
	require.NoError(t, err)
	assert.Equal(t, int64(7), msg.GetHeadId())
	assert.Equal(t, "superadmin", msg.GetEvent().GetKey())

	rpc := e.logs.Lines(t, "rpc")
	require.NotEmpty(t, rpc)
	var unaryLine map[string]any
	for _, l := range rpc {
		if l["method"] == unaryCall {
			unaryLine = l
		}
	}
	require.NotNil(t, unaryLine)
	assert.Equal(t, "OK", unaryLine["code"])
	assert.Equal(t, "superadmin", unaryLine["identity_kind"])
	assert.NotEmpty(t, unaryLine["request_id"])
	assert.Contains(t, unaryLine, "duration")
	assert.NotContains(t, e.logs.String(), adminToken, "tokens are never logged")
}

func TestUnauthenticatedRejectedBeforeValidation(t *testing.T) {
	e := start(t)
	ctx := testCtx(t)
	invalidUnary := &testgrpc.SimpleRequest{ResponseSize: -5}
	invalidWatch := &policyv1.WatchRequest{AfterId: -9}

	cases := []struct {
		name string
		ctx  context.Context
	}{
		{"no token", ctx},
		{"unknown token", metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer nope")},
		{"not bearer", metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+adminToken)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testgrpc.NewTestServiceClient(e.conn).UnaryCall(tc.ctx, invalidUnary)
			requireReason(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
			_, err = e.watch(tc.ctx, invalidWatch)
			requireReason(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		})
	}
	assert.Zero(t, e.validations.Load(), "validation never ran for an anonymous caller")
}

func TestInvalidRequest(t *testing.T) {
	e := start(t)
	ctx := withToken(testCtx(t))

	check := func(t *testing.T, err error, field, rule string) {
		t.Helper()
		requireReason(t, err, codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
		info := errs.Infos(err)[0]
		assert.Equal(t, map[string]string{"field": field, "rule": rule}, info.GetMetadata())
		var br *errdetails.BadRequest
		for _, d := range status.Convert(err).Details() {
			if d, ok := d.(*errdetails.BadRequest); ok {
				br = d
			}
		}
		require.NotNil(t, br, "BadRequest detail")
		assert.Equal(t, field, br.GetFieldViolations()[0].GetField())
	}
	_, err := testgrpc.NewTestServiceClient(e.conn).UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: -1})
	check(t, err, "response_size", validate.RuleMin)
	_, err = e.watch(ctx, &policyv1.WatchRequest{Kinds: []string{"member", ""}})
	check(t, err, "kinds[1]", validate.RuleRequired)
}

func TestPanicRecoveredAndLogged(t *testing.T) {
	e := start(t)
	ctx := metadata.AppendToOutgoingContext(withToken(testCtx(t)), reqctx.MetadataKey, "req-panic-1")

	var header metadata.MD
	_, err := testgrpc.NewTestServiceClient(e.conn).UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 1}, grpc.Header(&header))
	require.Equal(t, codes.Internal, status.Code(err))
	assert.Equal(t, "internal error (request id req-panic-1)", status.Convert(err).Message())
	assert.Equal(t, []string{"req-panic-1"}, header.Get(reqctx.MetadataKey))

	ctx2 := metadata.AppendToOutgoingContext(withToken(testCtx(t)), reqctx.MetadataKey, "req-panic-2")
	_, err = e.watch(ctx2, &policyv1.WatchRequest{Kinds: []string{"panic"}})
	require.Equal(t, codes.Internal, status.Code(err))

	panics := e.logs.Lines(t, "panic")
	require.Len(t, panics, 2)
	ids := []any{panics[0]["request_id"], panics[1]["request_id"]}
	assert.ElementsMatch(t, []any{"req-panic-1", "req-panic-2"}, ids)
	for _, p := range panics {
		assert.Contains(t, p["stack"], "server_test.go", "stack is logged")
	}

	// The server still serves afterwards.
	_, err = testgrpc.NewTestServiceClient(e.conn).UnaryCall(withToken(testCtx(t)), &testgrpc.SimpleRequest{})
	require.NoError(t, err)
	assert.Contains(t, e.metrics(t), `millwright_grpc_panics_total{method="`+unaryCall+`"} 1`)
}

func TestInternalErrorsDoNotLeak(t *testing.T) {
	e := start(t)
	var header metadata.MD
	_, err := testgrpc.NewTestServiceClient(e.conn).UnaryCall(withToken(testCtx(t)), &testgrpc.SimpleRequest{ResponseSize: 2}, grpc.Header(&header))
	require.Equal(t, codes.Internal, status.Code(err))
	msg := status.Convert(err).Message()
	assert.NotContains(t, msg, "SELECT")
	id := header.Get(reqctx.MetadataKey)
	require.Len(t, id, 1, "a request id is generated when the caller sends none")
	assert.Equal(t, "internal error (request id "+id[0]+")", msg)
	internal := e.logs.Lines(t, "internal error")
	require.Len(t, internal, 1)
	assert.Equal(t, id[0], internal[0]["request_id"], "the logged error can be found from the reply")
}

func TestRequestID(t *testing.T) {
	e := start(t)
	cases := []struct {
		name, sent string
		kept       bool
	}{
		{"adopted", "abc-123", true},
		{"unsafe replaced", `x" forged="1`, false},
		{"too long replaced", strings.Repeat("a", 200), false},
		{"absent generated", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			if tc.sent != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, reqctx.MetadataKey, tc.sent)
			}
			var header metadata.MD
			_, err := testgrpc.NewTestServiceClient(e.conn).EmptyCall(ctx, &testgrpc.Empty{}, grpc.Header(&header))
			require.NoError(t, err)
			got := header.Get(reqctx.MetadataKey)
			require.Len(t, got, 1)
			if tc.kept {
				assert.Equal(t, tc.sent, got[0])
			} else {
				assert.NotEqual(t, tc.sent, got[0])
				assert.True(t, reqctx.ValidID(got[0]))
			}
		})
	}
}

func TestPublicMethodsNeedNoToken(t *testing.T) {
	e := start(t)
	ctx := testCtx(t)

	_, err := testgrpc.NewTestServiceClient(e.conn).EmptyCall(ctx, &testgrpc.Empty{})
	require.NoError(t, err, "Options.Public")

	_, err = healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health")

	rs, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, rs.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""},
	}))
	resp, err := rs.Recv()
	require.NoError(t, err, "reflection")
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	assert.Contains(t, names, "millwright.policy.v1.EventService")
	require.NoError(t, rs.CloseSend())
}

// TestReflectionServesComments: grpcurl describe shows the contracts' documentation, because
// reflection answers from the documented descriptors (pkg/apidesc), and still knows the
// services that are not ours (health).
func TestReflectionServesComments(t *testing.T) {
	e := start(t)
	ctx := testCtx(t)
	rs, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	file := func(symbol string) *descriptorpb.FileDescriptorProto {
		t.Helper()
		require.NoError(t, rs.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}}))
		resp, err := rs.Recv()
		require.NoError(t, err)
		raw := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
		require.NotEmpty(t, raw, "%s: %v", symbol, resp.GetErrorResponse())
		var fd descriptorpb.FileDescriptorProto
		require.NoError(t, proto.Unmarshal(raw[0], &fd))
		return &fd
	}
	fd := file("millwright.policy.v1.EventService")
	var comments []string
	for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
		comments = append(comments, loc.GetLeadingComments())
	}
	assert.Contains(t, strings.Join(comments, "\n"), "Watch", "the RPC's comment is served")
	assert.Equal(t, "grpc/health/v1/health.proto", file("grpc.health.v1.Health").GetName())
	require.NoError(t, rs.CloseSend())
}

func TestMetricsCountRefusals(t *testing.T) {
	e := start(t)
	ctx := testCtx(t)
	client := testgrpc.NewTestServiceClient(e.conn)
	for range 2 {
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	}
	_, err := client.UnaryCall(withToken(ctx), &testgrpc.SimpleRequest{ResponseSize: -1})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = e.watch(ctx, &policyv1.WatchRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	m := e.metrics(t)
	for _, want := range []string{
		`millwright_grpc_refusals_total{method="` + unaryCall + `",reason="ERROR_REASON_UNAUTHENTICATED"} 2`,
		`millwright_grpc_refusals_total{method="` + unaryCall + `",reason="ERROR_REASON_INVALID_FIELD"} 1`,
		`millwright_grpc_refusals_total{method="` + policyWatch + `",reason="ERROR_REASON_UNAUTHENTICATED"} 1`,
		`millwright_grpc_requests_total{code="Unauthenticated",method="` + unaryCall + `"} 2`,
		`millwright_grpc_request_duration_seconds_count{method="` + unaryCall + `"} 3`,
		`go_goroutines`,
	} {
		assert.Contains(t, m, want)
	}
	logged := false
	for _, l := range e.logs.Lines(t, "rpc") {
		if l["reason"] == "ERROR_REASON_INVALID_FIELD" && l["code"] == "InvalidArgument" {
			logged = true
		}
	}
	assert.True(t, logged, "the reason is logged")
}

func healthStatus(ctx context.Context, conn *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return -1
	}
	return resp.GetStatus()
}

func TestHealthFollowsSchema(t *testing.T) {
	var current atomic.Int64
	current.Store(1)
	e := start(t, func(s setup) {
		s.opts.SchemaVersion = func(context.Context) (int64, int64, error) { return current.Load(), 2, nil }
	})
	ctx := testCtx(t)
	const svc = "millwright.policy.v1.EventService"
	notServing, serving := healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING

	// Not migrated: not serving, and it stays so across several polls.
	time.Sleep(700 * time.Millisecond)
	assert.Equal(t, notServing, healthStatus(ctx, e.conn, ""))
	assert.Equal(t, notServing, healthStatus(ctx, e.conn, svc))
	assert.Equal(t, serving, healthStatus(ctx, e.conn, server.LivenessService), "liveness does not follow the schema")
	assert.Equal(t, http.StatusServiceUnavailable, e.healthz(t))
	require.NotEmpty(t, e.logs.Lines(t, "not ready"))
	assert.Len(t, e.logs.Lines(t, "not ready"), 1, "one line per reason, not one per poll")

	current.Store(2) // migrate ran
	require.Eventually(t, func() bool {
		return healthStatus(ctx, e.conn, "") == serving && healthStatus(ctx, e.conn, svc) == serving
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, http.StatusOK, e.healthz(t))

	current.Store(1) // the database went back (restore): stop serving
	require.Eventually(t, func() bool { return healthStatus(ctx, e.conn, "") == notServing }, 5*time.Second, 20*time.Millisecond)
	current.Store(2)
	require.Eventually(t, func() bool { return healthStatus(ctx, e.conn, "") == serving }, 5*time.Second, 20*time.Millisecond)

	// Shutdown: a health watcher sees NOT_SERVING before its stream ends.
	w, err := healthpb.NewHealthClient(e.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	msg, err := w.Recv()
	require.NoError(t, err)
	require.Equal(t, serving, msg.GetStatus())
	e.cancel()
	msg, err = w.Recv()
	require.NoError(t, err)
	assert.Equal(t, notServing, msg.GetStatus())
	_, err = w.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err))
	require.NoError(t, e.stop(t))
}

func TestServingWithoutDatabase(t *testing.T) {
	e := start(t)
	require.Eventually(t, func() bool {
		return healthStatus(testCtx(t), e.conn, "") == healthpb.HealthCheckResponse_SERVING
	}, 5*time.Second, 20*time.Millisecond)
}

func TestGracefulStop(t *testing.T) {
	t.Run("in-flight unary call completes", func(t *testing.T) {
		e := start(t)
		errc, began := stopDuringCall(t, e, 3)
		require.NoError(t, <-errc, "the 300ms call finishes during graceful stop")
		require.NoError(t, e.stop(t))
		assert.Less(t, time.Since(began), 3*time.Second)
	})

	t.Run("open watch streams end with Unavailable", func(t *testing.T) {
		e := start(t)
		ctx := withToken(testCtx(t))
		s, err := policyv1.NewEventServiceClient(e.conn).Watch(ctx, &policyv1.WatchRequest{Kinds: []string{"block"}})
		require.NoError(t, err)
		_, err = s.Recv()
		require.NoError(t, err)
		began := time.Now()
		e.cancel()
		_, err = s.Recv()
		assert.Equal(t, codes.Unavailable, status.Code(err), "consumer is told to reconnect")
		reason, _ := errs.Reason(err)
		assert.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE, reason, "a reason clients can retry on")
		require.NoError(t, e.stop(t))
		assert.Less(t, time.Since(began), 3*time.Second, "well within the 5s shutdown timeout")
	})

	t.Run("stuck call is cut at the deadline", func(t *testing.T) {
		e := start(t, func(s setup) { s.cfg.ShutdownTimeout = 400 * time.Millisecond })
		errc, began := stopDuringCall(t, e, 4)
		require.NoError(t, e.stop(t))
		elapsed := time.Since(began)
		assert.GreaterOrEqual(t, elapsed, 400*time.Millisecond)
		assert.Less(t, elapsed, 3*time.Second)
		assert.Equal(t, codes.Unavailable, status.Code(<-errc))
		assert.NotEmpty(t, e.logs.Lines(t, "graceful stop timed out; closing remaining calls"))
	})
}

// stopDuringCall starts a unary call (ResponseSize picks its behaviour), waits until it is in
// its handler (the server has validated it), then begins the graceful stop: it returns the
// call's outcome and when the stop began.
func stopDuringCall(t *testing.T, e *env, size int32) (<-chan error, time.Time) {
	t.Helper()
	ctx := withToken(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := testgrpc.NewTestServiceClient(e.conn).UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: size})
		errc <- err
	}()
	require.Eventually(t, func() bool { return e.validations.Load() > 0 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	began := time.Now()
	e.cancel()
	return errc, began
}

func TestBackground(t *testing.T) {
	t.Run("failure stops the server", func(t *testing.T) {
		boom := errors.New("listener lost")
		e := start(t, func(s setup) {
			s.opts.Background = []func(context.Context) error{
				func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
				func(context.Context) error { time.Sleep(50 * time.Millisecond); return boom },
			}
		})
		select {
		case err := <-e.done:
			require.ErrorIs(t, err, boom)
			close(e.done)
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not stop on a background failure")
		}
	})

	t.Run("loops are stopped and waited for", func(t *testing.T) {
		var finished atomic.Bool
		e := start(t, func(s setup) {
			s.opts.Background = []func(context.Context) error{func(ctx context.Context) error {
				<-ctx.Done()
				time.Sleep(50 * time.Millisecond)
				finished.Store(true)
				return ctx.Err()
			}}
		})
		require.NoError(t, e.stop(t))
		assert.True(t, finished.Load(), "Run returned only after the loop did")
	})
}

func TestDial(t *testing.T) {
	e := start(t)
	conn, err := server.Dial(context.Background(), e.grpcAddr, adminToken)
	require.NoError(t, err)
	defer conn.Close()

	// The caller's request id follows the call to the next service.
	ctx := reqctx.WithRequestID(testCtx(t), "upstream-id-1")
	var header metadata.MD
	resp, err := testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&header))
	require.NoError(t, err)
	assert.Equal(t, "superadmin", resp.GetUsername(), "bearer token sent")
	assert.Equal(t, []string{"upstream-id-1"}, header.Get(reqctx.MetadataKey))

	anon, err := server.Dial(context.Background(), e.grpcAddr, "")
	require.NoError(t, err)
	defer anon.Close()
	_, err = testgrpc.NewTestServiceClient(anon).UnaryCall(testCtx(t), &testgrpc.SimpleRequest{})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
}

// dialNothing dials, with Dial, an address nothing listens on: one that was free a moment ago.
func dialNothing(t *testing.T) (string, *grpc.ClientConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	conn, err := server.Dial(context.Background(), addr, adminToken)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return addr, conn
}

// TestDialWaitsForALateUpstream: a service that calls another before it listens (both
// starting at once) is answered once the peer is up, not refused with the last dial error
// while the connection sits out a reconnect backoff.
func TestDialWaitsForALateUpstream(t *testing.T) {
	addr, conn := dialNothing(t)
	// Nothing listens yet: the connection fails and starts backing off.
	conn.Connect()
	time.Sleep(1500 * time.Millisecond)

	answered := make(chan error, 1)
	go func() {
		_, err := testgrpc.NewTestServiceClient(conn).UnaryCall(testCtx(t), &testgrpc.SimpleRequest{})
		answered <- err
	}()
	time.Sleep(200 * time.Millisecond)
	start(t, func(s setup) { s.cfg.GRPCAddr = addr })
	select {
	case err := <-answered:
		require.NoError(t, err)
	case <-time.After(server.UpstreamWait + time.Second):
		t.Fatal("no answer after the upstream came up")
	}
}

// TestDialAnswersUnavailableWhenTheUpstreamStaysDown: the bounded wait ends in Unavailable
// (which callers retry), not in a hang or DeadlineExceeded.
func TestDialAnswersUnavailableWhenTheUpstreamStaysDown(t *testing.T) {
	_, conn := dialNothing(t)
	began := time.Now()
	_, err := testgrpc.NewTestServiceClient(conn).UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	reason, _ := errs.Reason(err)
	assert.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE, reason)
	assert.Less(t, time.Since(began), server.UpstreamWait+2*time.Second)
}

func TestRunRequiresOptions(t *testing.T) {
	err := server.Run(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0"}, server.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "required")
}
