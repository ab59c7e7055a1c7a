package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/millwright/millwright/pkg/failpoint"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// Receiver is one open Watch stream: an event (nil on a heartbeat) and the server's head.
type Receiver interface {
	Recv() (ev *commonv1.Event, head int64, err error)
}

// Opener opens a Watch stream after afterID; the stream must end when ctx is done. Each
// service adapts its generated client in a few lines (see the package example).
type Opener func(ctx context.Context, afterID int64) (Receiver, error)

// FollowOptions configure Follow. Open, After, Apply and Resync are required.
type FollowOptions struct {
	Open Opener
	// After returns the id to resume after: for a durable consumer, the stored last applied
	// id (read again after every failure, so it is the truth, not Follow's memory).
	After func(ctx context.Context) (int64, error)
	// Apply applies one event. A durable consumer must store e.ID with the effect in one
	// transaction; that is what makes "exactly once" hold across crashes. An error stops the
	// stream; Follow retries from After() after a backoff.
	Apply func(ctx context.Context, e Event) error
	// Resync rebuilds the consumer from a snapshot (dropping what it had) and returns the
	// position the snapshot reflects; Follow resumes after it. Called when the position is
	// older than the stream's retention window.
	Resync func(ctx context.Context) (int64, error)
	// OnHead, if set, receives the server's head with every message (lag = head - applied).
	OnHead func(head int64)
	// MinBackoff and MaxBackoff bound the jittered delay between reconnects. Defaults 100ms
	// and 2s (server.ReconnectBackoff's bound: a follower is live again within about 2 s of
	// its producer, and a reconnect every 2 s per replica costs the producer nothing); the
	// delay resets once a stream delivers a message.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives reconnects. Default slog.Default().
	Logger *slog.Logger
}

// Follow consumes a stream until ctx is done, then returns ctx.Err(). It opens the stream
// after After(), applies events in order, and on any stream error (server gone, EOF, Apply
// failure) reconnects with jittered backoff from After(); on a resync error it calls Resync
// and resumes after the position it returns. It never applies an id at or below the position
// it opened from, so as long as Apply stores the position atomically with its effect, every
// event is applied exactly once.
func Follow(ctx context.Context, o FollowOptions) error {
	if o.Open == nil || o.After == nil || o.Apply == nil || o.Resync == nil {
		return errors.New("stream: Follow needs Open, After, Apply and Resync")
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(2*time.Second, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger.With("component", "stream.follow")
	bo := newBackoff(o.MinBackoff, o.MaxBackoff)
	var resumeAt *int64 // set by a resync: the position to open from once
	for {
		justResynced := resumeAt != nil
		err := followOnce(ctx, &o, resumeAt, bo.reset)
		resumeAt = nil
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if re, ok := AsResync(err); ok {
			// A snapshot that is already too old again must not become a hot loop of rebuilds.
			if justResynced && !sleep(ctx, bo.next()) {
				return ctx.Err()
			}
			log.Warn("stream consumer is behind the retention window; resyncing", "oldest_id", re.OldestID)
			pos, rerr := o.Resync(ctx)
			if rerr == nil {
				resumeAt = &pos
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			err = fmt.Errorf("stream: resync: %w", rerr)
		}
		d := bo.next()
		log.Warn("stream consumer interrupted; reconnecting", "error", err, "retry_in", d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// followOnce runs one stream until it fails.
func followOnce(ctx context.Context, o *FollowOptions, resumeAt *int64, progress func()) error {
	var after int64
	if resumeAt != nil {
		after = *resumeAt
	} else {
		a, err := o.After(ctx)
		if err != nil {
			return fmt.Errorf("stream: read resume position: %w", err)
		}
		after = a
	}
	// Cancelling sctx ends the RPC, so nothing outlives this attempt.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := o.Open(sctx, after)
	if err != nil {
		return fmt.Errorf("stream: open after %d: %w", after, err)
	}
	last := after
	for {
		pe, head, err := r.Recv()
		if err != nil {
			return fmt.Errorf("stream: receive after %d: %w", last, err)
		}
		if pe != nil {
			e := FromProto(pe)
			if e.ID <= last {
				continue // a server must not resend, but if it does, never apply twice
			}
			failpoint.Hit("stream/follow/received") // received, not yet applied
			if err := o.Apply(ctx, e); err != nil {
				return fmt.Errorf("stream: apply %d: %w", e.ID, err)
			}
			failpoint.Hit("stream/follow/applied")
			last = e.ID
		}
		// Only real progress resets the backoff: an event that keeps failing to apply must
		// not turn the retry loop into a hot loop.
		progress()
		if o.OnHead != nil {
			o.OnHead(head)
		}
	}
}
