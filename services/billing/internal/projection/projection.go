package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/billing/internal/seats"
)

// Source is policy as billing sees it: its event stream and its snapshot.
type Source interface {
	// Watch streams events with an id greater than after, in id order, until ctx ends or the
	// stream breaks (stream.Opener).
	Watch(ctx context.Context, after int64) (stream.Receiver, error)
	// Snapshot returns every member and builder flag with the stream position it is
	// consistent with.
	Snapshot(ctx context.Context) (seats.Snapshot, error)
}

// Store is the part of the store the consumer writes.
type Store interface {
	// Position is the last applied stream position.
	Position(ctx context.Context) (int64, error)
	// Apply writes an event's change and its position in one transaction; applied is false
	// when the event was at or below the stored position.
	Apply(ctx context.Context, eventID int64, change seats.Change) (applied bool, err error)
	// Resync replaces the projection with a snapshot.
	Resync(ctx context.Context, snap seats.Snapshot) error
}

// Options tune the consumer.
type Options struct {
	// MinBackoff and MaxBackoff bound the wait before reopening a broken stream.
	MinBackoff, MaxBackoff time.Duration
	// PollInterval is how often WaitFor re-reads the stored position while waiting, which
	// catches progress made by another replica's consumer.
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Consumer follows policy's stream into the store.
type Consumer struct {
	src   Source
	store Store
	opts  Options

	mu      sync.Mutex
	applied int64         // highest position this process knows is committed
	wake    chan struct{} // closed and replaced whenever applied changes
	head    int64         // upstream head last seen
}

// New returns a consumer; Run starts it.
func New(src Source, store Store, opts Options) *Consumer {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 25 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Consumer{src: src, store: store, opts: opts, wake: make(chan struct{})}
}

// Run follows the stream until ctx ends (stream.Follow): open Watch after the stored
// position, apply each event with its position in one transaction, and on a resync request
// rebuild from a snapshot. A broken stream is reopened with backoff from the stored position,
// so no event is skipped, and Apply skips anything at or below the stored position, so none
// is applied twice, even with several replicas consuming into one database. It returns
// ctx's error.
func (c *Consumer) Run(ctx context.Context) error {
	return stream.Follow(ctx, stream.FollowOptions{
		Open: c.src.Watch,
		After: func(ctx context.Context) (int64, error) {
			pos, err := c.store.Position(ctx)
			if err == nil {
				c.set(pos, false)
			}
			return pos, err
		},
		Apply:      c.apply,
		Resync:     c.resync,
		OnHead:     c.seeHead,
		MinBackoff: c.opts.MinBackoff,
		MaxBackoff: c.opts.MaxBackoff,
		Logger:     c.opts.Logger,
	})
}

func (c *Consumer) apply(ctx context.Context, e stream.Event) error {
	change, err := seats.Decode(seats.Event{
		ID: e.ID, Kind: e.Kind, Workspace: e.Workspace, Key: e.Key, Op: e.Op, Payload: string(e.Payload),
	})
	if err != nil {
		// Skipping the event would miscount seats silently and retrying it would stall the
		// projection forever: rebuild from the snapshot, which has the truth and a position at
		// or past this event (it committed before we could read it). Later events still on the
		// open stream at or below the snapshot's position are then skipped by Apply.
		c.opts.Logger.ErrorContext(ctx, "billing projection: undecodable event; resyncing",
			"event_id", e.ID, "kind", e.Kind, "error", err.Error())
		_, err := c.resync(ctx)
		return err
	}
	if _, err := c.store.Apply(ctx, e.ID, change); err != nil {
		return err
	}
	c.set(e.ID, false)
	return nil
}

func (c *Consumer) resync(ctx context.Context) (int64, error) {
	snap, err := c.src.Snapshot(ctx)
	if err != nil {
		return 0, err
	}
	if err := c.store.Resync(ctx, snap); err != nil {
		return 0, err
	}
	// The position may move back to the snapshot's; waiters re-read it from the store.
	c.set(snap.Position, true)
	return snap.Position, nil
}

func (c *Consumer) set(pos int64, force bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pos > c.applied || force && pos != c.applied {
		c.applied = pos
		close(c.wake)
		c.wake = make(chan struct{})
	}
}

func (c *Consumer) seeHead(h int64) {
	c.mu.Lock()
	c.head = max(c.head, h)
	c.mu.Unlock()
}

// Lag is the upstream head last seen and this process's applied position.
func (c *Consumer) Lag() (head, applied int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.head, c.applied
}

// ErrBehind is WaitFor's answer when the projection did not reach the position in time.
var ErrBehind = errors.New("projection: behind the requested position")

// WaitFor returns once the stored position is at least pos, or ErrBehind after bound. It
// reads the store (the truth, which another replica's consumer may have advanced) and wakes
// early when this process's consumer applies an event.
func (c *Consumer) WaitFor(ctx context.Context, pos int64, bound time.Duration) error {
	return WaitFor(ctx, c.store, pos, bound, c.opts.PollInterval, c.wakeChan)
}

func (c *Consumer) wakeChan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wake
}

// WaitFor polls store's position every poll (or when wake fires) until it is at least pos,
// or returns ErrBehind after bound. wake may be nil.
func WaitFor(ctx context.Context, store interface {
	Position(context.Context) (int64, error)
}, pos int64, bound, poll time.Duration, wake func() <-chan struct{}) error {
	if pos <= 0 {
		return nil
	}
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for {
		var w <-chan struct{}
		if wake != nil {
			w = wake() // before reading, so an advance in between is not missed
		}
		cur, err := store.Position(ctx)
		if err != nil {
			return err
		}
		if cur >= pos {
			return nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-deadline.C:
			t.Stop()
			return fmt.Errorf("%w: at %d, want %d", ErrBehind, cur, pos)
		case <-w:
		case <-t.C:
		}
		t.Stop()
	}
}
