package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// Fakes of the UPSTREAM services with scripted behaviour, served by real gRPC servers on
// 127.0.0.1: this tests the client (wire, metadata, retries, cache), not the services.

// fakeServer is a gRPC server that can be stopped and restarted on the same address.
type fakeServer struct {
	t        *testing.T
	addr     string
	register func(*grpc.Server)

	mu   sync.Mutex
	srv  *grpc.Server
	done chan struct{}
}

func startFake(t *testing.T, register func(*grpc.Server)) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, addr: "127.0.0.1:0", register: register}
	f.start()
	t.Cleanup(f.stop)
	return f
}

func (f *fakeServer) start() {
	f.t.Helper()
	var lis net.Listener
	// The port was just released by stop; retry briefly in case the kernel still holds it.
	require.Eventually(f.t, func() bool {
		var err error
		lis, err = net.Listen("tcp", f.addr)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "listen on %s", f.addr)
	f.addr = lis.Addr().String()
	srv := grpc.NewServer()
	f.register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	f.mu.Lock()
	f.srv, f.done = srv, done
	f.mu.Unlock()
}

// stop ends the server and every open stream (clients see Unavailable).
func (f *fakeServer) stop() {
	f.mu.Lock()
	srv, done := f.srv, f.done
	f.srv = nil
	f.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
}

// dialTest connects to addr without credentials (the client adds them per call) and with a
// short reconnect backoff so a restarted fake is found in milliseconds, not grpc's 1 s+.
func dialTest(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// authorization returns the authorization metadata values of an incoming call.
func authorization(ctx context.Context) []string {
	md, _ := metadata.FromIncomingContext(ctx)
	return md.Get("authorization")
}

// fakeRoleset answers ResolveConnection with script(call number from 1).
type fakeRoleset struct {
	rolesetv1.UnimplementedConnectionServiceServer
	script func(ctx context.Context, n int, req *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error)

	mu    sync.Mutex
	calls int
	auths [][]string
	reqs  []*rolesetv1.ResolveConnectionRequest
}

func (f *fakeRoleset) ResolveConnection(ctx context.Context, req *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.auths = append(f.auths, authorization(ctx))
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	return f.script(ctx, n, req)
}

func (f *fakeRoleset) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// fakeSettings answers GetOperatorSettings from a builder map and counts reads per workspace.
type fakeSettings struct {
	policyv1.UnimplementedSettingsServiceServer

	mu      sync.Mutex
	builder map[string]bool
	reads   map[string]int
	auths   [][]string
	// hold, when set, is called inside a read after the value was taken: lets a test
	// interleave an invalidation with a read in flight.
	hold func(ws string)
}

func newFakeSettings() *fakeSettings {
	return &fakeSettings{builder: map[string]bool{}, reads: map[string]int{}}
}

func (f *fakeSettings) GetOperatorSettings(ctx context.Context, req *policyv1.GetOperatorSettingsRequest) (*policyv1.GetOperatorSettingsResponse, error) {
	f.mu.Lock()
	ws := req.GetWorkspace()
	f.reads[ws]++
	f.auths = append(f.auths, authorization(ctx))
	v := f.builder[ws]
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		hold(ws)
	}
	return &policyv1.GetOperatorSettingsResponse{Settings: &policyv1.OperatorSettings{Builder: v}}, nil
}

func (f *fakeSettings) set(ws string, v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builder[ws] = v
}

func (f *fakeSettings) readsOf(ws string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[ws]
}

// fakeEvents is policy's EventService: each Watch sends a heartbeat at once (unless silent),
// then whatever the test pushes, until the test ends it with an error or the server stops.
type fakeEvents struct {
	policyv1.UnimplementedEventServiceServer

	mu     sync.Mutex
	silent bool
	head   int64
	subs   map[chan watchMsg]struct{}
	reqs   []*policyv1.WatchRequest
	auths  [][]string
}

type watchMsg struct {
	resp *policyv1.WatchResponse
	err  error
}

func newFakeEvents() *fakeEvents { return &fakeEvents{subs: map[chan watchMsg]struct{}{}} }

func (f *fakeEvents) Watch(req *policyv1.WatchRequest, srv policyv1.EventService_WatchServer) error {
	ch := make(chan watchMsg, 16)
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.auths = append(f.auths, authorization(srv.Context()))
	f.subs[ch] = struct{}{}
	silent, head := f.silent, f.head
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subs, ch)
		f.mu.Unlock()
	}()
	if !silent {
		if err := srv.Send(&policyv1.WatchResponse{HeadId: head}); err != nil {
			return err
		}
	}
	for {
		select {
		case <-srv.Context().Done():
			return srv.Context().Err()
		case m := <-ch:
			if m.err != nil {
				return m.err
			}
			if err := srv.Send(m.resp); err != nil {
				return err
			}
		}
	}
}

func (f *fakeEvents) broadcast(m watchMsg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		ch <- m
	}
}

// publish sends a settings event for ws on every open stream.
func (f *fakeEvents) publish(ws string) {
	f.mu.Lock()
	f.head++
	id := f.head
	f.mu.Unlock()
	f.broadcast(watchMsg{resp: &policyv1.WatchResponse{HeadId: id, Event: eventProto(id, ws)}})
}

// end ends every open stream with err.
func (f *fakeEvents) end(err error) { f.broadcast(watchMsg{err: err}) }

func (f *fakeEvents) opens() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}
