package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

type watched struct {
	ev   *stream.Event
	head int64
}

// watch runs s.Watch in the background; cancel ends it and returns its error.
func watch(t *testing.T, s *stream.Stream, after int64, kinds []string, slow time.Duration) (<-chan watched, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan watched, 10000)
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(ctx, after, kinds, func(e *stream.Event, head int64) error {
			if slow > 0 && e != nil {
				time.Sleep(slow)
			}
			out <- watched{e, head}
			return nil
		})
	}()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return out, stop
}

// collectUntil reads events (skipping heartbeats) until one with id >= last arrives.
func collectUntil(t *testing.T, ch <-chan watched, last int64) []stream.Event {
	t.Helper()
	var evs []stream.Event
	timeout := time.After(20 * time.Second)
	for {
		select {
		case w := <-ch:
			if w.ev == nil {
				continue
			}
			require.GreaterOrEqual(t, w.head, w.ev.ID)
			evs = append(evs, *w.ev)
			if w.ev.ID >= last {
				return evs
			}
		case <-timeout:
			t.Fatalf("timed out at %d events, want up to id %d", len(evs), last)
		}
	}
}

func TestWatchBacklogThenLive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		buffer int           // 0: default
		slow   time.Duration // a slow consumer overflows a small buffer: falls back to the table
	}{
		{name: "fast consumer"},
		{name: "lagging consumer", buffer: 2, slow: time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			pool := pgtest.Pool(t, newDB(t))
			s := stream.New(pool, stream.Options{})
			if tc.buffer > 0 {
				stream.SetWatchBuffer(s, tc.buffer)
			}
			startStream(t, s)
			for i := range 50 {
				insertItem(t, pool, fmt.Sprint("backlog", i))
			}
			// Writers run while the watcher switches from backlog to live.
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := range 150 {
					insertItem(t, pool, fmt.Sprint("live", i))
				}
			})
			ch, stop := watch(t, s, 0, nil, tc.slow)
			wg.Wait()
			head := waitHead(t, s, pool)
			got := ids(collectUntil(t, ch, head))
			require.NoError(t, ignoreCanceled(stop()))
			requireStrictlyIncreasing(t, got)
			require.Equal(t, outboxIDs(t, pool), got)
		})
	}
}

// TestWatchBeforeReady: a Watch opened before the listener has its start position (a
// restarted replica takes RPCs at once) must not skip the events committed between its backlog
// read and that position.
func TestWatchBeforeReady(t *testing.T) {
	leakCheck(t)
	pool := pgtest.Pool(t, newDB(t))
	insertItem(t, pool, "before")
	s := stream.New(pool, stream.Options{})
	ch, stop := watch(t, s, 0, nil, 0)
	time.Sleep(100 * time.Millisecond) // long enough for a Watch that does not wait to read its backlog
	insertItem(t, pool, "between")     // committed before Run takes its start position
	startStream(t, s)
	insertItem(t, pool, "after")
	head := waitHead(t, s, pool)
	got := ids(collectUntil(t, ch, head))
	require.NoError(t, ignoreCanceled(stop()))
	require.Equal(t, outboxIDs(t, pool), got)
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func TestWatch(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{HeartbeatInterval: 50 * time.Millisecond})
	startStream(t, s)
	insertItem(t, pool, "old")
	_, err := pool.Exec(ctx, `INSERT INTO member VALUES ('w', 'm1', 'admin', false, NULL)`)
	require.NoError(t, err)
	head := waitHead(t, s, pool)

	t.Run("kinds filter", func(t *testing.T) {
		ch, stop := watch(t, s, 0, []string{"member"}, 0)
		evs := collectUntil(t, ch, head)
		require.Len(t, evs, 1)
		require.Equal(t, "member", evs[0].Kind)
		insertItem(t, pool, "ignored")
		_, err := pool.Exec(ctx, `UPDATE member SET role = 'viewer'`)
		require.NoError(t, err)
		h := waitHead(t, s, pool)
		evs = collectUntil(t, ch, h)
		require.Len(t, evs, 1)
		require.Equal(t, []string{"member", "update"}, []string{evs[0].Kind, evs[0].Op})
		require.NoError(t, ignoreCanceled(stop()))
	})

	t.Run("heartbeat when idle carries the head", func(t *testing.T) {
		h, err := stream.Head(ctx, pool)
		require.NoError(t, err)
		ch, stop := watch(t, s, h, nil, 0)
		select {
		case w := <-ch:
			require.Nil(t, w.ev)
			require.Equal(t, h, w.head)
		case <-time.After(5 * time.Second):
			t.Fatal("no heartbeat")
		}
		require.NoError(t, ignoreCanceled(stop()))
	})

	t.Run("negative after starts at the head", func(t *testing.T) {
		ch, stop := watch(t, s, -1, nil, 0)
		// The first heartbeat proves the watcher is live; only then write.
		w := <-ch
		require.Nil(t, w.ev)
		insertItem(t, pool, "new")
		h := waitHead(t, s, pool)
		evs := collectUntil(t, ch, h)
		require.Len(t, evs, 1)
		require.Equal(t, h, evs[0].ID)
		require.NoError(t, ignoreCanceled(stop()))
	})

	t.Run("send error ends the watch", func(t *testing.T) {
		boom := errors.New("client gone")
		err := s.Watch(ctx, 0, nil, func(*stream.Event, int64) error { return boom })
		require.ErrorIs(t, err, boom)
	})
}

func TestWatchResyncAfterPrune(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{Retention: time.Nanosecond, PruneInterval: -1, HeartbeatInterval: 20 * time.Millisecond, Clock: twoDaysAhead})
	startStream(t, s)
	for i := range 5 {
		insertItem(t, pool, fmt.Sprint(i))
	}
	_, err := s.Prune(ctx)
	require.NoError(t, err)
	insertItem(t, pool, "after prune")
	head := waitHead(t, s, pool)

	for _, after := range []int64{0, 1, 4} {
		t.Run(fmt.Sprint("after ", after), func(t *testing.T) {
			err := s.Watch(ctx, after, nil, func(*stream.Event, int64) error { return nil })
			re, ok := stream.AsResync(err)
			require.True(t, ok, "%v", err)
			require.EqualValues(t, 5, re.OldestID)

			// Through gRPC: status with ErrorInfo, and back.
			st := status.Convert(err)
			require.Equal(t, codes.FailedPrecondition, st.Code())
			back, ok := stream.AsResync(st.Err())
			require.True(t, ok)
			require.Equal(t, re.OldestID, back.OldestID)
		})
	}
	t.Run("after the head: history was lost", func(t *testing.T) {
		err := s.Watch(ctx, head+100, nil, func(*stream.Event, int64) error { return nil })
		re, ok := stream.AsResync(err)
		require.True(t, ok, "%v", err)
		require.EqualValues(t, 5, re.OldestID)
	})
	t.Run("from the oldest id is fine", func(t *testing.T) {
		ch, stop := watch(t, s, 5, nil, 0)
		evs := collectUntil(t, ch, head)
		require.Equal(t, []int64{head}, ids(evs))
		require.NoError(t, ignoreCanceled(stop()))
	})
	t.Run("other errors are not resync", func(t *testing.T) {
		_, ok := stream.AsResync(status.Error(codes.FailedPrecondition, "something else"))
		require.False(t, ok)
		_, ok = stream.AsResync(errors.New("x"))
		require.False(t, ok)
		_, ok = stream.AsResync(nil)
		require.False(t, ok)
	})
}
