package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Calls made while a batch is in flight go out together in the next one, and a lone call is
// sent at once (no waiting for a batch to fill).
func TestBatcherCoalescesWhileInFlight(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := newBatcher(128, 1, func(_ context.Context, qs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(qs))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out := make([]int, len(qs))
		for i, q := range qs {
			out[i] = q * 10
		}
		return out, nil
	})
	ctx := context.Background()

	var wg sync.WaitGroup
	got := make([]int, 21)
	wg.Go(func() { got[0], _ = b.do(ctx, 0) })
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sizes) == 1 }, 5*time.Second, time.Millisecond)
	for i := 1; i <= 20; i++ {
		wg.Go(func() { got[i], _ = b.do(ctx, i) })
	}
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.pending) == 20 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.Equal(t, []int{1, 20}, sizes, "the 20 calls made during the first batch form the second")
	for i, v := range got {
		require.Equal(t, i*10, v)
	}

	// Alone: sent at once, in a batch of one.
	start := time.Now()
	v, err := b.do(ctx, 7)
	require.NoError(t, err)
	require.Equal(t, 70, v)
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, []int{1, 20, 1}, sizes)
}

// A batch that fails as a whole is retried item by item: only the failing item fails.
func TestBatcherFailureFailsOnlyTheFailingItem(t *testing.T) {
	bad := errors.New("bad item")
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	b := newBatcher(128, 1, func(_ context.Context, qs []int) ([]int, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			<-release
		}
		for _, q := range qs {
			if q == 3 {
				return nil, bad
			}
		}
		return qs, nil
	})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	wg.Go(func() { _, errs[0] = b.do(ctx, 0) })
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return calls == 1 }, 5*time.Second, time.Millisecond)
	for i := 1; i < 6; i++ {
		wg.Go(func() { _, errs[i] = b.do(ctx, i) })
	}
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.pending) == 5 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		if i == 3 {
			require.ErrorIs(t, err, bad)
		} else {
			require.NoError(t, err, "item %d", i)
		}
	}
}

// A caller that left before its batch was sent is not written for.
func TestBatcherSkipsCallersThatLeft(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sent []int
	b := newBatcher(128, 1, func(_ context.Context, qs []int) ([]int, error) {
		mu.Lock()
		sent = append(sent, qs...)
		first := len(sent) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return qs, nil
	})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.do(context.Background(), 0) })
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var err error
	wg.Go(func() { _, err = b.do(ctx, 1) })
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.pending) == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	close(release)
	wg.Wait()
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.active == 0 }, 5*time.Second, time.Millisecond)
	require.Equal(t, []int{0}, sent)
}
