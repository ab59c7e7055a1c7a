package gw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/millwright/millwright/pkg/errs"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
	"github.com/millwright/millwright/pkg/server"
)

// Upstreams names the gRPC address of each service.
type Upstreams struct {
	Policy, Roleset, Billing string
}

// Gateway is the HTTP handler plus the client connections it owns.
type Gateway struct {
	http.Handler
	conns map[string]*grpc.ClientConn
}

// RequestIDHeader is passed through to the services as the `x-request-id` metadata key.
const RequestIDHeader = "X-Request-Id"

// New dials the upstreams (lazily: a service that is down answers 503 per request, it does not
// stop the gateway from starting) and builds the handler. Serve it through Server, which adds
// the bounds on bodies, writes and idle connections (Limits).
func New(ctx context.Context, up Upstreams, openapi []byte, logger *slog.Logger) (*Gateway, error) {
	mux := runtime.NewServeMux(
		runtime.WithIncomingHeaderMatcher(headerMatcher),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		// A unary answer states its length, so logRequests can send it before it logs.
		runtime.WithWriteContentLength(),
	)
	g := &Gateway{conns: map[string]*grpc.ClientConn{}}
	addrs := map[string]string{"policy": up.Policy, "roleset": up.Roleset, "billing": up.Billing}
	for name, addr := range addrs {
		// server.ClientOptions: a short reconnect backoff, and calls that wait a bounded time for
		// an upstream that is restarting instead of failing at once with its last dial error.
		conn, err := grpc.NewClient(addr, append(server.ClientOptions(),
			grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
			// Fixed flow-control windows turn off gRPC's bandwidth-delay estimation, which
			// otherwise follows every answer with a PING and its ACK: one more write, read
			// and two goroutine wake-ups per call (docs/benchmarks.md, "gateway"). Its
			// benefit, windows grown past 64 KiB on long fat links, is had here at once.
			grpc.WithInitialWindowSize(upstreamWindow),
			grpc.WithInitialConnWindowSize(upstreamWindow))...)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gateway: dial %s at %q: %w", name, addr, err)
		}
		g.conns[name] = conn
	}
	for _, r := range registrations {
		var err error
		if r.upstream == byService {
			err = auditv1.RegisterAuditServiceHandlerClient(ctx, mux, auditRouter(g.conns))
		} else {
			err = r.register(ctx, mux, g.conns[r.upstream])
		}
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gateway: register %s: %w", r.service, err)
		}
	}

	root := http.NewServeMux()
	root.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi)
	})
	root.HandleFunc("GET /healthz", g.healthz)
	root.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(server.WithTraceContext(r)))
	}))
	g.Handler = logRequests(logger, root)
	return g, nil
}

// upstreamWindow is the flow-control window of each stream and connection to an upstream:
// the largest answers the services send in practice (a builder check's, capped at 1 MiB) arrive
// without waiting for a window update; larger ones still flow, a window at a time.
const upstreamWindow = 1 << 20

// Close closes the upstream connections.
func (g *Gateway) Close() {
	for _, c := range g.conns {
		_ = c.Close()
	}
}

// headerMatcher forwards the request id besides grpc-gateway's defaults (which already carry
// `Authorization` as the `authorization` metadata key).
func headerMatcher(key string) (string, bool) {
	if strings.EqualFold(key, RequestIDHeader) {
		return "x-request-id", true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// errorHandler keeps grpc-gateway's body (the google.rpc.Status with its ErrorInfo details) and
// only corrects the one mapping the architecture needs differently: FailedPrecondition is a
// state conflict (a seat cap, builder rights off), answered 409, not 400.
//
// A request body that failed under Limits is answered 413 or 408 (bodyRefusal): grpc-gateway
// sees only a decode error there, which it would answer 400.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if code, refusal, ok := bodyRefusal(r); ok {
		w.Header().Set("Connection", "close")
		writeRefusal(w, code, refusal)
		return
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.FailedPrecondition {
		w = &statusOverride{ResponseWriter: w, code: http.StatusConflict}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, decodeRefusal(err))
}

// decodeRefusal gives the gateway's own refusals of a request it could not decode (a JSON
// body or a query or path parameter of the wrong type) the form of every other refusal:
// InvalidArgument with ErrorInfo INVALID_FIELD naming the field and the rule "json", and a
// BadRequest violation. grpc-gateway answers them with protojson's bare message and no
// details; the services' own InvalidArgument answers always carry details and pass as they are.
func decodeRefusal(err error) error {
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.InvalidArgument || len(s.Details()) > 0 {
		return err
	}
	msg := strings.TrimPrefix(s.Message(), "proto: ")
	field := "body"
	if m := decodeField.FindStringSubmatch(msg); m != nil {
		field = snakeCase(m[1] + m[2] + m[3])
	}
	if strings.HasSuffix(field, "_json") && strings.Contains(msg, "invalid value for string field") {
		msg = field + " must be a JSON string holding the document (the object encoded as a string, " +
			`e.g. "{\"value\": {}}"), not a JSON object or array`
	}
	return errs.InvalidField(field, "json", "the request could not be decoded: "+msg)
}

// decodeField finds the field in protojson's and grpc-gateway's decoding errors: "invalid value
// for string field flowJson: {", `unknown field "nope"`, "parameter: workspace".
var decodeField = regexp.MustCompile(`field ([A-Za-z_][A-Za-z0-9_]*)|field "([A-Za-z_][A-Za-z0-9_.]*)"|parameter: ([A-Za-z_][A-Za-z0-9_.]*)`)

// snakeCase turns protojson's JSON name (flowJson) back into the proto name (flow_json) every
// other refusal uses.
func snakeCase(name string) string {
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

type statusOverride struct {
	http.ResponseWriter
	code int
}

func (s *statusOverride) WriteHeader(int) { s.ResponseWriter.WriteHeader(s.code) }

// healthz asks every upstream's grpc.health.v1, all at once, and answers 200 only when all are
// SERVING. A health check does not wait for a connection (WaitForReady false, unlike other
// calls): an upstream that is down is reported as such at once, not after the deadline.
func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	out := map[string]string{}
	ok := true
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, conn := range g.conns {
		wg.Go(func() {
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				out[name] = "UNREACHABLE: " + status.Convert(err).Message()
				ok = false
			default:
				out[name] = resp.GetStatus().String()
				ok = ok && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
			}
		})
	}
	wg.Wait()
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": ok, "upstreams": out})
}

// logRequests writes one structured line per request; it never logs headers, so tokens stay out.
func logRequests(logger *slog.Logger, next http.Handler) http.Handler {
	if logger == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		// net/http would send the answer only once this function returns, after the log
		// line's write; an answer of a stated length can go first (without a length, a flush
		// would turn it into a chunked one).
		if rec.Header().Get("Content-Length") != "" {
			rec.Flush()
		}
		logger.LogAttrs(r.Context(), slog.LevelInfo, "http",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rec.code), slog.Duration("duration", time.Since(start)),
			slog.String("request_id", r.Header.Get(RequestIDHeader)))
	})
}

type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

// Flush keeps server-streaming RPCs (Watch) streaming through the recorder.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Serve runs the HTTP server until ctx ends, then shuts it down within timeout.
func Serve(ctx context.Context, srv *http.Server, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}
