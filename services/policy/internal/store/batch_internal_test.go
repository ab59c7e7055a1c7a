package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heldBatcher is a batcher of ints whose first batch waits until release is closed, so the
// calls made meanwhile queue up for the next one; it records every batch it was given.
type heldBatcher struct {
	b       *batcher[int, int]
	release chan struct{}
	mu      sync.Mutex
	batches [][]int
}

// newHeldBatcher answers each batch with answer, after holding the first one.
func newHeldBatcher(answer func(qs []int) ([]int, error)) *heldBatcher {
	h := &heldBatcher{release: make(chan struct{})}
	h.b = newBatcher(128, 1, func(_ context.Context, qs []int) ([]int, error) {
		h.mu.Lock()
		h.batches = append(h.batches, slices.Clone(qs))
		first := len(h.batches) == 1
		h.mu.Unlock()
		if first {
			<-h.release
		}
		return answer(qs)
	})
	return h
}

// sent returns the batches given so far.
func (h *heldBatcher) sent() [][]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.batches)
}

// waitHeld waits until the first batch is in flight, held.
func (h *heldBatcher) waitHeld(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return len(h.sent()) == 1 }, 5*time.Second, time.Millisecond)
}

// waitBatcher waits until cond holds of the batcher's own state.
func (h *heldBatcher) waitBatcher(t *testing.T, cond func(b *batcher[int, int]) bool) {
	t.Helper()
	require.Eventually(t, func() bool { h.b.mu.Lock(); defer h.b.mu.Unlock(); return cond(h.b) }, 5*time.Second, time.Millisecond)
}

// waitPending waits until n calls wait for the next batch.
func (h *heldBatcher) waitPending(t *testing.T, n int) {
	t.Helper()
	h.waitBatcher(t, func(b *batcher[int, int]) bool { return len(b.pending) == n })
}

// sizes returns the sizes of the batches given so far.
func (h *heldBatcher) sizes() []int {
	var out []int
	for _, b := range h.sent() {
		out = append(out, len(b))
	}
	return out
}

// Calls made while a batch is in flight go out together in the next one, and a lone call is
// sent at once (no waiting for a batch to fill).
func TestBatcherCoalescesWhileInFlight(t *testing.T) {
	h := newHeldBatcher(func(qs []int) ([]int, error) {
		out := make([]int, len(qs))
		for i, q := range qs {
			out[i] = q * 10
		}
		return out, nil
	})
	ctx := context.Background()

	var wg sync.WaitGroup
	got := make([]int, 21)
	wg.Go(func() { got[0], _ = h.b.do(ctx, 0) })
	h.waitHeld(t)
	for i := 1; i <= 20; i++ {
		wg.Go(func() { got[i], _ = h.b.do(ctx, i) })
	}
	h.waitPending(t, 20)
	close(h.release)
	wg.Wait()
	require.Equal(t, []int{1, 20}, h.sizes(), "the 20 calls made during the first batch form the second")
	for i, v := range got {
		require.Equal(t, i*10, v)
	}

	// Alone: sent at once, in a batch of one.
	start := time.Now()
	v, err := h.b.do(ctx, 7)
	require.NoError(t, err)
	require.Equal(t, 70, v)
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, []int{1, 20, 1}, h.sizes())
}

// A batch that fails as a whole is retried item by item: only the failing item fails.
func TestBatcherFailureFailsOnlyTheFailingItem(t *testing.T) {
	bad := errors.New("bad item")
	h := newHeldBatcher(func(qs []int) ([]int, error) {
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
	wg.Go(func() { _, errs[0] = h.b.do(ctx, 0) })
	h.waitHeld(t)
	for i := 1; i < 6; i++ {
		wg.Go(func() { _, errs[i] = h.b.do(ctx, i) })
	}
	h.waitPending(t, 5)
	close(h.release)
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
	h := newHeldBatcher(func(qs []int) ([]int, error) { return qs, nil })
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = h.b.do(context.Background(), 0) })
	h.waitHeld(t)
	ctx, cancel := context.WithCancel(context.Background())
	var err error
	wg.Go(func() { _, err = h.b.do(ctx, 1) })
	h.waitPending(t, 1)
	cancel()
	close(h.release)
	wg.Wait()
	require.ErrorIs(t, err, context.Canceled)
	h.waitBatcher(t, func(b *batcher[int, int]) bool { return b.active == 0 })
	require.Equal(t, []int{0}, slices.Concat(h.sent()...))
}
