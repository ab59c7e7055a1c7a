package store

import (
	"context"
	"sync"
	"time"
)

// batcher is group commit for one statement of the job path (RecordRun, FinishRun): calls
// made while a batch is in flight wait in pending, and the next flusher takes all of them
// (up to maxBatch) into one multi-row statement, so at 64 callers one durable COMMIT serves
// many runs instead of each run paying its own. Nothing waits for a batch to fill: a call
// arriving while fewer than maxFlush batches are in flight starts a flusher at once, so a lone
// caller pays no added delay.
//
// exec runs a batch as one statement (one implicit transaction) and answers one result per
// item, in order (exactly len(qs) of them), or fails as a whole; then each item is run again alone, so one item's
// failure (a duplicate job id, say) fails only that item.
type batcher[Q, A any] struct {
	exec     func(ctx context.Context, qs []Q) ([]A, error)
	maxBatch int
	maxFlush int

	mu      sync.Mutex
	pending []*call[Q, A]
	active  int
}

type call[Q, A any] struct {
	ctx  context.Context
	q    Q
	a    A
	err  error
	done chan struct{}
}

// batchTimeout bounds a batch's statement: the batch outlives any one caller's context (one
// caller leaving must not cancel the others' writes).
const batchTimeout = 30 * time.Second

func newBatcher[Q, A any](maxBatch, maxFlush int, exec func(ctx context.Context, qs []Q) ([]A, error)) *batcher[Q, A] {
	return &batcher[Q, A]{exec: exec, maxBatch: maxBatch, maxFlush: maxFlush}
}

// do runs q in the next batch and waits for its result. A caller whose context ends while
// its batch is in flight gets the context's error, and its write may still commit (as when a
// cancellation races a COMMIT).
func (b *batcher[Q, A]) do(ctx context.Context, q Q) (A, error) {
	c := &call[Q, A]{ctx: ctx, q: q, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if b.active < b.maxFlush {
		b.active++
		go b.flushLoop(context.WithoutCancel(ctx))
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.a, c.err
	case <-ctx.Done():
		var zero A
		return zero, ctx.Err()
	}
}

// flushLoop flushes batches until nothing is pending.
func (b *batcher[Q, A]) flushLoop(base context.Context) {
	for {
		b.mu.Lock()
		n := min(len(b.pending), b.maxBatch)
		if n == 0 {
			b.active--
			b.mu.Unlock()
			return
		}
		batch := make([]*call[Q, A], 0, n)
		for _, c := range b.pending[:n] {
			// A caller that already left is not written for.
			if c.ctx.Err() != nil {
				c.err = c.ctx.Err()
				close(c.done)
				continue
			}
			batch = append(batch, c)
		}
		b.pending = append(b.pending[:0], b.pending[n:]...)
		b.mu.Unlock()
		if len(batch) > 0 {
			b.flush(base, batch)
		}
	}
}

func (b *batcher[Q, A]) flush(base context.Context, batch []*call[Q, A]) {
	ctx, cancel := context.WithTimeout(base, batchTimeout)
	defer cancel()
	qs := make([]Q, len(batch))
	for i, c := range batch {
		qs[i] = c.q
	}
	as, err := b.exec(ctx, qs)
	if err == nil {
		for i, c := range batch {
			c.a = as[i]
			close(c.done)
		}
		return
	}
	if len(batch) == 1 {
		batch[0].err = err
		close(batch[0].done)
		return
	}
	// The statement failed as a whole: run each item alone, so only the failing one fails.
	for _, c := range batch {
		as, err := b.exec(ctx, []Q{c.q})
		if err == nil {
			c.a = as[0]
		}
		c.err = err
		close(c.done)
	}
}
