package server_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/server"
)

// The connection limits, over real sockets. Each limit is set to about a second and each
// assertion allows several times that: a cut is asserted only to come well before it would
// have come without the limit (gRPC's defaults: 120 s handshake, never idle, no stream cap).

func withLimits(l server.Limits) func(setup) {
	return func(s setup) { s.cfg.Limits = l }
}

// A connection that never sends the HTTP/2 preface is closed after ConnectionTimeout.
// gRPC's default would hold it 120 s.
func TestSilentConnectionIsClosed(t *testing.T) {
	e := start(t, withLimits(server.Limits{ConnectionTimeout: time.Second}))
	c, err := net.Dial("tcp", e.grpcAddr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(15*time.Second)))
	begin := time.Now()
	// The server sends its SETTINGS first; read until it closes.
	buf := make([]byte, 1024)
	for err == nil {
		_, err = c.Read(buf)
	}
	var ne net.Error
	if ok := asNet(err, &ne); ok {
		require.False(t, ne.Timeout(), "still open after 15 s")
	}
	took := time.Since(begin)
	require.GreaterOrEqual(t, took, 900*time.Millisecond)
	require.Less(t, took, 8*time.Second)
}

func asNet(err error, target *net.Error) bool {
	var ne net.Error
	ok := errors.As(err, &ne)
	if ok {
		*target = ne
	}
	return ok
}

// A connection with no call in flight is sent away after IdleTimeout (the client drops to
// IDLE and would reconnect on its next call).
func TestIdleConnectionIsSentAway(t *testing.T) {
	e := start(t, withLimits(server.Limits{IdleTimeout: time.Second}))
	ctx := testCtx(t)
	_, err := testgrpc.NewTestServiceClient(e.conn).EmptyCall(ctx, &testgrpc.Empty{})
	require.NoError(t, err)
	require.Equal(t, connectivity.Ready, e.conn.GetState())
	begin := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	require.True(t, e.conn.WaitForStateChange(wctx, connectivity.Ready), "still READY after 15 s idle")
	took := time.Since(begin)
	require.GreaterOrEqual(t, took, 900*time.Millisecond)
	require.Less(t, took, 8*time.Second)
}

// One connection holds at most MaxConcurrentStreams calls: with two streams open a third
// call waits (here until its deadline), and runs once one of them ends.
func TestConcurrentStreamsAreBounded(t *testing.T) {
	e := start(t, withLimits(server.Limits{MaxConcurrentStreams: 2}))
	ctx := testCtx(t)
	var cancels []context.CancelFunc
	for range 2 {
		sctx, cancel := context.WithCancel(withToken(ctx))
		cancels = append(cancels, cancel)
		s, err := policyv1.NewEventServiceClient(e.conn).Watch(sctx, &policyv1.WatchRequest{Kinds: []string{"block"}})
		require.NoError(t, err)
		_, err = s.Recv()
		require.NoError(t, err)
	}
	client := testgrpc.NewTestServiceClient(e.conn)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := client.EmptyCall(cctx, &testgrpc.Empty{})
	cancel()
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "a third call ran beside two open streams: %v", err)

	cancels[0]()
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = client.EmptyCall(cctx, &testgrpc.Empty{})
	require.NoError(t, err)
	cancels[1]()
}

// Metadata past MaxHeaderListSize is refused; a normal call on the same server works.
func TestOversizedMetadataIsRefused(t *testing.T) {
	e := start(t)
	ctx := testCtx(t)
	// A fresh connection, so that the client knows the server's limit from its SETTINGS; the
	// server enforces it either way.
	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	_, err = client.EmptyCall(ctx, &testgrpc.Empty{})
	require.NoError(t, err)
	big := metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("b", server.MaxHeaderListSize+1024))
	_, err = client.EmptyCall(big, &testgrpc.Empty{})
	require.Error(t, err)
	_, err = client.EmptyCall(ctx, &testgrpc.Empty{})
	require.NoError(t, err)
}
