package stream_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/stream"
)

// fakeWatch is a Watch server in memory: each open gets a fresh stream fed by msgs and broken
// by fail.
type fakeWatch struct {
	mu     sync.Mutex
	afters []int64
	msgs   chan *commonv1.Event // nil event: a heartbeat
	fail   chan error
}

type fakeRecv struct {
	ctx context.Context
	w   *fakeWatch
}

func (r fakeRecv) Recv() (*commonv1.Event, int64, error) {
	select {
	case e := <-r.w.msgs:
		return e, e.GetId(), nil
	case err := <-r.w.fail:
		return nil, 0, err
	case <-r.ctx.Done():
		return nil, 0, r.ctx.Err()
	}
}

func (w *fakeWatch) open(ctx context.Context, after int64) (stream.Receiver, error) {
	w.mu.Lock()
	w.afters = append(w.afters, after)
	w.mu.Unlock()
	return fakeRecv{ctx: ctx, w: w}, nil
}

func (w *fakeWatch) opens() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.afters) }

// TestLiveFollower: live only from a stream's first message and while it is heard from; every
// break, resync and new start drops the cache; events reach Apply; every stream opens from
// the head.
func TestLiveFollower(t *testing.T) {
	w := &fakeWatch{msgs: make(chan *commonv1.Event), fail: make(chan error)}
	var drops atomic.Int64
	var applied sync.Map
	f := stream.NewLiveFollower(stream.LiveOptions{
		Open:       w.open,
		Apply:      func(e stream.Event) { applied.Store(e.ID, e.Kind) },
		Drop:       func() { drops.Add(1) },
		Silence:    200 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	require.Eventually(t, func() bool { return w.opens() == 1 }, 2*time.Second, time.Millisecond)
	require.False(t, f.Live(), "not live before the first message")
	before := drops.Load()
	w.msgs <- &commonv1.Event{} // heartbeat
	require.Eventually(t, f.Live, 2*time.Second, time.Millisecond)
	require.Greater(t, drops.Load(), before, "what was read before the stream started is dropped")

	w.msgs <- &commonv1.Event{Id: 7, Kind: "member"}
	require.Eventually(t, func() bool { return f.Position() == 7 }, 2*time.Second, time.Millisecond)
	kind, _ := applied.Load(int64(7))
	require.Equal(t, "member", kind)

	require.Eventually(t, func() bool { return !f.Live() }, 2*time.Second, time.Millisecond, "a silent stream stops being live")
	w.msgs <- &commonv1.Event{}
	require.Eventually(t, f.Live, 2*time.Second, time.Millisecond, "and is live again when heard from")

	before = drops.Load()
	w.fail <- errors.New("gone")
	require.Eventually(t, func() bool { return w.opens() == 2 }, 2*time.Second, time.Millisecond)
	require.False(t, f.Live(), "a broken stream is not live")
	require.Greater(t, drops.Load(), before, "a break drops the cache")

	w.msgs <- &commonv1.Event{}
	require.Eventually(t, f.Live, 2*time.Second, time.Millisecond)
	before = drops.Load()
	w.fail <- (&stream.ResyncError{OldestID: 3}).GRPCStatus().Err()
	require.Eventually(t, func() bool { return f.Resyncs() == 1 }, 2*time.Second, time.Millisecond)
	require.False(t, f.Live())
	require.Greater(t, drops.Load(), before, "a resync drops the cache")

	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.False(t, f.Live())
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.afters {
		require.Equal(t, int64(-1), a, "every stream opens from the head")
	}
}
