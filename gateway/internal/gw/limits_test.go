package gw

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/millwright/millwright/gateway"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// These tests run the gateway as cmd/gateway does (Server over a real listener) and talk to
// it over raw sockets, since the attacks are about what a client does on the wire. Each limit
// is set to about a second, and each assertion allows several times that: a cut is asserted
// only to come well before the attack would have ended by itself.

// slowUpstream answers UpdateOperatorSettings at once and streams Watch slowly (five messages
// 200 ms apart), longer than the write and body limits the stream test sets.
type slowUpstream struct {
	policyv1.UnimplementedSettingsServiceServer
	policyv1.UnimplementedEventServiceServer
}

func (slowUpstream) UpdateOperatorSettings(context.Context, *policyv1.UpdateOperatorSettingsRequest) (*policyv1.UpdateOperatorSettingsResponse, error) {
	return &policyv1.UpdateOperatorSettingsResponse{}, nil
}

func (slowUpstream) Watch(_ *policyv1.WatchRequest, s grpc.ServerStreamingServer[policyv1.WatchResponse]) error {
	for i := range 5 {
		time.Sleep(200 * time.Millisecond)
		if err := s.Send(&policyv1.WatchResponse{HeadId: int64(i + 1)}); err != nil {
			return err
		}
	}
	return nil
}

// startLimited serves the gateway under lim on a real listener and returns its address.
func startLimited(t *testing.T, lim Limits) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	policyv1.RegisterSettingsServiceServer(gs, slowUpstream{})
	policyv1.RegisterEventServiceServer(gs, slowUpstream{})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	up := lis.Addr().String()

	g, err := New(context.Background(), Upstreams{Policy: up, Roleset: up, Billing: up}, gateway.OpenAPI, nil)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := Server("", g, lim)
	go func() { _ = srv.Serve(hl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return hl.Addr().String()
}

func fastLimits() Limits {
	l := DefaultLimits()
	l.ReadHeaderTimeout = time.Second
	l.BodyReadTimeout = time.Second
	l.IdleTimeout = time.Second
	l.WriteTimeout = time.Second
	l.MaxBodyBytes = 1024
	l.MaxHeaderBytes = 1024
	return l
}

// trickle writes prefix, then one space every 100 ms until the connection fails or 30 s
// pass (the attack of issue 11: a byte every 2.5 s, still open after 30 s).
func trickle(t *testing.T, c net.Conn, prefix string) {
	t.Helper()
	_, err := io.WriteString(c, prefix)
	require.NoError(t, err)
	go func() {
		for range 300 {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.Write([]byte(" ")); err != nil { // JSON whitespace, header value
				return
			}
		}
	}()
}

// readUntilClosed reads what the server sends until it closes the connection (or 15 s pass,
// which fails the test) and returns it with the time that took from start.
func readUntilClosed(t *testing.T, c net.Conn, start time.Time) (string, time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(15*time.Second)))
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			var ne net.Error
			if ok := asNetErr(err, &ne); ok && ne.Timeout() {
				t.Fatalf("the connection was still open after 15 s; read so far: %q", b.String())
			}
			return b.String(), time.Since(start)
		}
	}
}

func asNetErr(err error, target *net.Error) bool {
	var ne net.Error
	ok := errors.As(err, &ne)
	if ok {
		*target = ne
	}
	return ok
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	// No test waits longer, whatever the server does.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	return c
}

// A body trickled a byte at a time is answered 408 and cut once BodyReadTimeout (1 s) has
// passed, not when the client is done (30 s).
func TestTrickledBodyIsCut(t *testing.T) {
	t.Parallel()
	got := trickleUntilCut(t, "PATCH /v1/workspaces/w/operator-settings HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", "trickle")
	require.True(t, strings.HasPrefix(got, "HTTP/1.1 408 "), "%q", got)
	require.Contains(t, got, `"rule":"read_timeout"`)
}

// trickleUntilCut sends req a byte at a time to a gateway with fastLimits and returns what it
// answered before it closed the connection, which must be once the 1 s timeout has passed and
// long before the client is done (what names the request in the failure).
func trickleUntilCut(t *testing.T, req, what string) string {
	t.Helper()
	c := dial(t, startLimited(t, fastLimits()))
	start := time.Now()
	trickle(t, c, req)
	got, took := readUntilClosed(t, c, start)
	require.GreaterOrEqual(t, took, 900*time.Millisecond)
	require.Less(t, took, 8*time.Second, "the %s was not cut within the bound", what)
	return got
}

// Headers sent a byte at a time (slowloris) are cut once ReadHeaderTimeout (1 s) has passed.
func TestSlowHeadersAreCut(t *testing.T) {
	t.Parallel()
	got := trickleUntilCut(t, "GET /openapi.json HTTP/1.1\r\nHost: gw\r\nX-Slow: ", "slow headers")
	require.NotContains(t, got, "200 OK")
}

// Headers past MaxHeaderBytes are refused 431.
func TestOversizedHeadersAre431(t *testing.T) {
	t.Parallel()
	addr := startLimited(t, fastLimits())
	c := dial(t, addr)
	// net/http allows 4 KiB of slack over MaxHeaderBytes; 16 KiB is past it either way.
	_, err := fmt.Fprintf(c, "GET /openapi.json HTTP/1.1\r\nHost: gw\r\nX-Big: %s\r\n\r\n", strings.Repeat("b", 16<<10))
	require.NoError(t, err)
	got, _ := readUntilClosed(t, c, time.Now())
	require.True(t, strings.HasPrefix(got, "HTTP/1.1 431 "), "%q", got)
}

// A Content-Length over MaxBodyBytes is answered 413 at once: the client has sent 10 bytes of
// the gigabyte it announced, and gets its answer without sending more.
func TestOversizedBodyIs413BeforeItIsRead(t *testing.T) {
	t.Parallel()
	addr := startLimited(t, fastLimits())
	c := dial(t, addr)
	start := time.Now()
	_, err := io.WriteString(c, "PATCH /v1/workspaces/w/operator-settings HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{\"patch\":")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"rule":"max_bytes"`)
	require.Less(t, time.Since(start), 5*time.Second)
}

// A body without a length (chunked) is cut at MaxBodyBytes and answered 413 too, not 400.
func TestOversizedChunkedBodyIs413(t *testing.T) {
	t.Parallel()
	addr := startLimited(t, fastLimits())
	body := io.MultiReader(strings.NewReader(`{"patch": {"x": "`), strings.NewReader(strings.Repeat("x", 4096)), strings.NewReader(`"}}`))
	req, err := http.NewRequest(http.MethodPatch, "http://"+addr+"/v1/workspaces/w/operator-settings", body)
	require.NoError(t, err)
	req.ContentLength = -1 // chunked
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", out)
	require.Contains(t, string(out), `"rule":"max_bytes"`)
}

// An idle keep-alive connection is closed after IdleTimeout (1 s).
func TestIdleConnectionIsClosed(t *testing.T) {
	t.Parallel()
	addr := startLimited(t, fastLimits())
	c := dial(t, addr)
	_, err := io.WriteString(c, "GET /openapi.json HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.False(t, resp.Close, "the connection should be kept alive after a normal request")

	start := time.Now()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(15*time.Second)))
	_, err = br.ReadByte()
	require.Error(t, err)
	var ne net.Error
	require.False(t, asNetErr(err, &ne) && ne.Timeout(), "still open after 15 s idle")
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 900*time.Millisecond)
	require.Less(t, took, 8*time.Second)
}

// Under the same limits, a normal request with a body works, and a server-streaming answer
// that lasts longer than WriteTimeout and BodyReadTimeout (1 s: five messages 200 ms apart,
// with both limits at 300 ms) is not cut: the limits bound each write, not the answer.
func TestNormalRequestsStillWork(t *testing.T) {
	t.Parallel()
	lim := fastLimits()
	lim.WriteTimeout = 300 * time.Millisecond
	lim.BodyReadTimeout = 300 * time.Millisecond
	addr := startLimited(t, lim)

	req, err := http.NewRequest(http.MethodPatch, "http://"+addr+"/v1/workspaces/w/operator-settings",
		strings.NewReader(`{"patch": {"builder": true}}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", out)

	start := time.Now()
	resp, err = http.Get("http://" + addr + "/v1/policy/events?after_id=0")
	require.NoError(t, err)
	out, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", out)
	require.Equal(t, 5, strings.Count(string(out), `"head_id"`), "%s", out)
	require.GreaterOrEqual(t, time.Since(start), time.Second)
}

func TestLimitsMustBePositive(t *testing.T) {
	require.NoError(t, DefaultLimits().Validate())
	l := DefaultLimits()
	l.BodyReadTimeout = 0
	l.MaxBodyBytes = -1
	err := l.Validate()
	require.ErrorContains(t, err, "--body-read-timeout must be positive")
	require.ErrorContains(t, err, "--max-body-bytes must be positive")
}
