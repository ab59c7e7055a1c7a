package policyclient_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/policyclient"
)

// watchConn is a policy that knows one user token and serves one Watch stream, which the test
// feeds (messages) and breaks (fail).
type watchConn struct {
	mu       sync.Mutex
	calls    int
	messages chan *policyv1.WatchResponse
	fail     chan error
}

func (c *watchConn) Invoke(_ context.Context, method string, _, reply any, _ ...grpc.CallOption) error {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	if method != policyv1.TokenService_Authenticate_FullMethodName {
		return status.Error(codes.Unimplemented, method)
	}
	resp, ok := reply.(*policyv1.AuthenticateResponse)
	if !ok {
		return status.Errorf(codes.Internal, "reply is a %T", reply)
	}
	proto.Merge(resp, &policyv1.AuthenticateResponse{Kind: policyv1.TokenKind_TOKEN_KIND_USER,
		Workspace: "w", Username: "op", TokenId: "t1", StreamPosition: 5, ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))})
	return nil
}

func (c *watchConn) Calls() int { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }

func (c *watchConn) NewStream(ctx context.Context, _ *grpc.StreamDesc, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return &watchStream{ctx: ctx, c: c}, nil
}

type watchStream struct {
	ctx context.Context
	c   *watchConn
}

func (s *watchStream) Header() (metadata.MD, error) { return nil, nil }
func (s *watchStream) Trailer() metadata.MD         { return nil }
func (s *watchStream) CloseSend() error             { return nil }
func (s *watchStream) Context() context.Context     { return s.ctx }
func (s *watchStream) SendMsg(any) error            { return nil }
func (s *watchStream) RecvMsg(m any) error {
	select {
	case r := <-s.c.messages:
		resp, ok := m.(*policyv1.WatchResponse)
		if !ok {
			return status.Errorf(codes.Internal, "message is a %T", m)
		}
		proto.Merge(resp, r)
		return nil
	case err := <-s.c.fail:
		return err
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// TestNothingCachedIsServedWhileTheStreamIsDown: once the Watch stream breaks, a revoke may
// pass unseen, so a cached identity is no longer served: the token is asked of policy again
// until the stream delivers.
func TestNothingCachedIsServedWhileTheStreamIsDown(t *testing.T) {
	c := &watchConn{messages: make(chan *policyv1.WatchResponse, 10), fail: make(chan error, 1)}
	a := policyclient.New(c, policyclient.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()

	tok := "mwu_" + strings.Repeat("A", 43)
	_, err := a.Authenticate(context.Background(), tok) // not cached: the stream has delivered nothing yet
	require.NoError(t, err)
	c.messages <- &policyv1.WatchResponse{HeadId: 5} // the heartbeat after the backlog
	require.Eventually(t, func() bool {
		_, err := a.Authenticate(context.Background(), tok)
		return err == nil && a.Len() == 1
	}, 2*time.Second, 5*time.Millisecond, "cached once the stream delivers")
	calls := c.Calls()
	_, err = a.Authenticate(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, calls, c.Calls(), "served from the cache while the stream is live")

	c.fail <- status.Error(codes.Unavailable, "policy went away")
	require.Eventually(t, func() bool { return a.Len() == 0 }, 2*time.Second, 5*time.Millisecond, "dropped when the stream broke")
	_, err = a.Authenticate(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, calls+1, c.Calls(), "asked of policy while the stream is down")
	_, err = a.Authenticate(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, calls+2, c.Calls(), "and not kept")
}
