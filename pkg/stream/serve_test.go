package stream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

// sink is a grpc.ServerStreamingServer that hands what is sent to a channel.
type sink[T any] struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *T
}

func (s *sink[T]) Context() context.Context { return s.ctx }
func (s *sink[T]) Send(m *T) error          { s.sent <- m; return nil }

func newSink[T any](ctx context.Context) *sink[T] {
	return &sink[T]{ctx: ctx, sent: make(chan *T, 100)}
}

var allowAll = func(context.Context) error { return nil }

// ServeWatch refuses before it reads anything: a caller allow refuses gets allow's error
// and no message, and a service without a stream answers Unavailable with its reason.
func TestServeWatchRefusals(t *testing.T) {
	ctx := context.Background()
	denied := status.Error(codes.PermissionDenied, "not a reader")
	srv := newSink[policyv1.WatchResponse](ctx)
	err := stream.ServeWatch(nil, &policyv1.WatchRequest{}, srv, func(context.Context) error { return denied })
	require.ErrorIs(t, err, denied)
	assert.Empty(t, srv.sent)

	err = stream.ServeWatch(nil, &policyv1.WatchRequest{}, srv, allowAll)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	reason, _ := errs.Reason(err)
	assert.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE, reason)
}

// One implementation serves the three services' EventService.Watch: each service's own
// WatchResponse gets the heartbeat's head and then the event, whole.
func TestServeWatchEveryService(t *testing.T) {
	leakCheck(t)
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{})
	startStream(t, s)
	ctx := context.Background()
	append1 := func(key string) int64 {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		id, err := stream.Append(ctx, tx, stream.Event{Kind: "run", Workspace: "w", Key: key, Op: "update", Payload: json.RawMessage(`{"ended":true}`)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, s.WaitFor(ctx, id))
		return id
	}
	check := func(t *testing.T, watch func(ctx context.Context, after int64) (<-chan *commonv1.Event, <-chan int64, func() error)) {
		first := append1(t.Name() + "/backlog")
		wctx, cancel := context.WithCancel(ctx)
		events, heads, done := watch(wctx, first-1)
		next := func() (*commonv1.Event, int64) {
			select {
			case e := <-events:
				return e, <-heads
			case <-time.After(10 * time.Second):
				t.Fatal("nothing sent within 10s")
				return nil, 0
			}
		}
		// The backlog (from first: its one event), then a heartbeat once it is drained.
		e, head := next()
		require.NotNil(t, e)
		assert.Equal(t, first, e.GetId())
		assert.Equal(t, t.Name()+"/backlog", e.GetKey())
		assert.GreaterOrEqual(t, head, first)
		e, head = next()
		assert.Nil(t, e, "a heartbeat carries no event")
		assert.GreaterOrEqual(t, head, first)
		id := append1(t.Name())
		for e == nil { // skip heartbeats
			e, head = next()
		}
		assert.Equal(t, id, e.GetId())
		assert.Equal(t, t.Name(), e.GetKey())
		assert.Equal(t, "run", e.GetKind())
		assert.GreaterOrEqual(t, head, id)
		cancel()
		require.ErrorIs(t, done(), context.Canceled)
	}
	t.Run("policy", func(t *testing.T) {
		check(t, func(ctx context.Context, after int64) (<-chan *commonv1.Event, <-chan int64, func() error) {
			return serveWatch(ctx, s, &policyv1.WatchRequest{AfterId: after}, func(m *policyv1.WatchResponse) (*commonv1.Event, int64) {
				return m.GetEvent(), m.GetHeadId()
			})
		})
	})
	t.Run("roleset", func(t *testing.T) {
		check(t, func(ctx context.Context, after int64) (<-chan *commonv1.Event, <-chan int64, func() error) {
			return serveWatch(ctx, s, &rolesetv1.WatchRequest{AfterId: after}, func(m *rolesetv1.WatchResponse) (*commonv1.Event, int64) {
				return m.GetEvent(), m.GetHeadId()
			})
		})
	})
	t.Run("billing", func(t *testing.T) {
		check(t, func(ctx context.Context, after int64) (<-chan *commonv1.Event, <-chan int64, func() error) {
			return serveWatch(ctx, s, &billingv1.WatchRequest{AfterId: after}, func(m *billingv1.WatchResponse) (*commonv1.Event, int64) {
				return m.GetEvent(), m.GetHeadId()
			})
		})
	})
}

// serveWatch runs ServeWatch for one service's response type T in the background, and
// splits what it sends into events and heads.
func serveWatch[T any, PT interface {
	*T
	proto.Message
	GetEvent() *commonv1.Event
	GetHeadId() int64
}](ctx context.Context, s *stream.Stream, req stream.WatchRequest, get func(PT) (*commonv1.Event, int64)) (<-chan *commonv1.Event, <-chan int64, func() error) {
	srv := newSink[T](ctx)
	events, heads, errc := make(chan *commonv1.Event, 100), make(chan int64, 100), make(chan error, 1)
	go func() { errc <- stream.ServeWatch[T, PT](s, req, srv, allowAll) }()
	go func() {
		for m := range srv.sent {
			e, h := get(PT(m))
			events <- e
			heads <- h
		}
	}()
	return events, heads, func() error {
		err := <-errc
		close(srv.sent)
		return err
	}
}
