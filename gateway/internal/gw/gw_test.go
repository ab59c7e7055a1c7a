package gw

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/millwright/millwright/gateway"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/server"
)

// Every millwright service that declares HTTP rules must be proxied, or its REST surface
// silently 404s.
func TestEveryHTTPServiceIsRegistered(t *testing.T) {
	listed := map[string]bool{}
	for _, r := range registrations {
		listed[r.service] = true
	}
	var missing []string
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "millwright.") {
			return true
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			if hasHTTPRule(sd) && !listed[string(sd.FullName())] {
				missing = append(missing, string(sd.FullName()))
			}
		}
		return true
	})
	require.Empty(t, missing, "services with HTTP rules that the gateway does not register")
}

func hasHTTPRule(sd protoreflect.ServiceDescriptor) bool {
	for i := 0; i < sd.Methods().Len(); i++ {
		if proto.HasExtension(sd.Methods().Get(i).Options(), annotations.E_Http) {
			return true
		}
	}
	return false
}

// fakeEvents answers with whatever error the test asks for, after recording the metadata the
// gateway forwarded: Watch for a server-streaming RPC, GetOperatorSettings for a unary one.
type fakeEvents struct {
	policyv1.UnimplementedEventServiceServer
	policyv1.UnimplementedSettingsServiceServer
	err error
	md  chan metadata.MD
}

func (f *fakeEvents) Watch(_ *policyv1.WatchRequest, s grpc.ServerStreamingServer[policyv1.WatchResponse]) error {
	md, _ := metadata.FromIncomingContext(s.Context())
	f.md <- md
	return f.err
}

func (f *fakeEvents) GetOperatorSettings(ctx context.Context, _ *policyv1.GetOperatorSettingsRequest) (*policyv1.GetOperatorSettingsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.md <- md
	return &policyv1.GetOperatorSettingsResponse{}, f.err
}

func startUpstream(t *testing.T, f *fakeEvents) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return serveUpstream(t, f, lis)
}

func serveUpstream(t *testing.T, f *fakeEvents, lis net.Listener) string {
	t.Helper()
	s := grpc.NewServer()
	policyv1.RegisterEventServiceServer(s, f)
	policyv1.RegisterSettingsServiceServer(s, f)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestErrorsKeepCodeAndDetail(t *testing.T) {
	info := &errdetails.ErrorInfo{Reason: "ERROR_REASON_SEAT_CAP_EXCEEDED", Domain: "millwright",
		Metadata: map[string]string{"before": "9", "after": "11", "cap": "10"}}
	for _, tc := range []struct {
		name string
		code codes.Code
		want int
	}{
		{"failed precondition is a conflict", codes.FailedPrecondition, http.StatusConflict},
		{"permission denied", codes.PermissionDenied, http.StatusForbidden},
		{"invalid argument", codes.InvalidArgument, http.StatusBadRequest},
		{"unauthenticated", codes.Unauthenticated, http.StatusUnauthorized},
		{"unavailable", codes.Unavailable, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := status.New(tc.code, "refused").WithDetails(info)
			require.NoError(t, err)
			f := &fakeEvents{err: st.Err(), md: make(chan metadata.MD, 1)}
			addr := startUpstream(t, f)
			g, err := New(context.Background(), Upstreams{Policy: addr, Roleset: addr, Billing: addr}, gateway.OpenAPI, nil)
			require.NoError(t, err)
			t.Cleanup(g.Close)
			srv := httptest.NewServer(g)
			t.Cleanup(srv.Close)

			for _, path := range []string{"/v1/workspaces/w/operator-settings", "/v1/policy/events?after_id=3"} {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
				req.Header.Set("Authorization", "Bearer secret-token")
				req.Header.Set(RequestIDHeader, "req-42")
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()

				md := <-f.md
				require.Equal(t, []string{"Bearer secret-token"}, md.Get("authorization"))
				require.Equal(t, []string{"req-42"}, md.Get("x-request-id"))
				if !strings.Contains(path, "events") {
					// A unary error is the HTTP status; a server-streaming one arrives in the
					// stream body after a 200. Either way the reason and numbers reach the client.
					require.Equal(t, tc.want, resp.StatusCode, "%s", body)
				}
				require.Contains(t, string(body), "ERROR_REASON_SEAT_CAP_EXCEEDED")
				require.Contains(t, string(body), `"cap":"10"`)
			}
		})
	}
}

func TestHealthzReportsEachUpstream(t *testing.T) {
	f := &fakeEvents{md: make(chan metadata.MD, 1)}
	addr := startUpstream(t, f)
	g, err := New(context.Background(), Upstreams{Policy: addr, Roleset: addr, Billing: "127.0.0.1:1"}, gateway.OpenAPI, nil)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	var out struct {
		OK        bool              `json:"ok"`
		Upstreams map[string]string `json:"upstreams"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.False(t, out.OK)
	require.Equal(t, "SERVING", out.Upstreams["policy"])
	require.Contains(t, out.Upstreams["billing"], "UNREACHABLE")
}

func TestOpenAPIServed(t *testing.T) {
	g, err := New(context.Background(), Upstreams{Policy: "127.0.0.1:1", Roleset: "127.0.0.1:1", Billing: "127.0.0.1:1"}, gateway.OpenAPI, nil)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &doc))
	require.Contains(t, doc, "paths")
}

// TestTraceContextFollowsTheCall: a REST caller's traceparent reaches the service, so its trace
// continues through the gateway (server.SetupTracing installs the W3C propagator).
func TestTraceContextFollowsTheCall(t *testing.T) {
	shutdown, err := server.SetupTracing(context.Background(), "gateway-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	f := &fakeEvents{md: make(chan metadata.MD, 1)}
	addr := startUpstream(t, f)
	g, err := New(context.Background(), Upstreams{Policy: addr, Roleset: addr, Billing: addr}, gateway.OpenAPI, nil)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	req := httptest.NewRequest(http.MethodGet, "/v1/workspaces/w/operator-settings", nil)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	g.ServeHTTP(httptest.NewRecorder(), req)
	md := <-f.md
	require.Len(t, md.Get("traceparent"), 1)
	require.Contains(t, md.Get("traceparent")[0], traceID, "the caller's trace id reaches the service")
}

// blockedWriter holds every write until release is closed.
type blockedWriter struct {
	release chan struct{}
	lines   chan string
}

func (b *blockedWriter) Write(p []byte) (int, error) {
	<-b.release
	b.lines <- string(p)
	return len(p), nil
}

// TestAnswerSentBeforeItsLogLine: a unary answer reaches the client while the gateway's log
// line for it is still being written (the write is held here), so a slow log costs the
// client nothing; the line is written all the same.
func TestAnswerSentBeforeItsLogLine(t *testing.T) {
	f := &fakeEvents{md: make(chan metadata.MD, 1)}
	addr := startUpstream(t, f)
	w := &blockedWriter{release: make(chan struct{}), lines: make(chan string, 1)}
	g, err := New(context.Background(), Upstreams{Policy: addr, Roleset: addr, Billing: addr}, gateway.OpenAPI,
		slog.New(slog.NewJSONHandler(w, nil)))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	srv := httptest.NewServer(Server("", g, DefaultLimits()).Handler)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-w.release:
		default:
			close(w.release)
		}
	})

	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(srv.URL + "/v1/workspaces/w/operator-settings")
	require.NoError(t, err, "the answer waited for the log line")
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "the answer waited for the log line")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.JSONEq(t, "{}", string(body))
	require.Empty(t, resp.TransferEncoding, "a unary answer states its length, it is not chunked")

	close(w.release)
	select {
	case line := <-w.lines:
		require.Contains(t, line, `"status":200`)
		require.Contains(t, line, `"path":"/v1/workspaces/w/operator-settings"`)
	case <-time.After(5 * time.Second):
		t.Fatal("no log line written")
	}
}

// pingCounter counts the PING frames (not their acknowledgements) a client sends on the
// connections of a listener.
type pingCounter struct {
	net.Listener
	pings atomic.Int64
}

func (l *pingCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(pr, preface); err != nil {
			return
		}
		fr := http2.NewFramer(nil, pr)
		fr.SetMaxReadFrameSize(1 << 24)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				_ = pr.CloseWithError(err)
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				l.pings.Add(1)
			}
		}
	}()
	return &teeConn{Conn: c, w: pw}, nil
}

type teeConn struct {
	net.Conn
	w *io.PipeWriter
}

func (c *teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		_, _ = c.w.Write(p[:n])
	}
	if err != nil {
		_ = c.w.CloseWithError(err)
	}
	return n, err
}

// TestNoPingPerAnswer: the gateway's upstream connections have fixed flow-control windows, so
// they do not follow each answer with a bandwidth-estimation PING (a write for the gateway
// and a read and an acknowledgement for the service, on every call).
func TestNoPingPerAnswer(t *testing.T) {
	f := &fakeEvents{md: make(chan metadata.MD, 1)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	counter := &pingCounter{Listener: lis}
	addr := serveUpstream(t, f, counter)
	g, err := New(context.Background(), Upstreams{Policy: addr, Roleset: addr, Billing: addr}, gateway.OpenAPI, nil)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	const calls = 20
	for range calls {
		resp, err := http.Get(srv.URL + "/v1/workspaces/w/operator-settings")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		<-f.md
		time.Sleep(5 * time.Millisecond) // let a PING, if any, follow the answer
	}
	require.Zero(t, counter.pings.Load(), "PINGs from the gateway over %d calls", calls)
}
