package stream

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/millwright/millwright/pkg/errs"
)

// errLagged ends a live phase whose watcher could not keep up; Watch then re-reads the table.
var errLagged = errors.New("stream: watcher lagged")

// errListenerDown ends a Watch whose listener lost its connection: until it has caught up
// again, events committed meanwhile would reach no one (see watchPhases).
var errListenerDown = errs.Unavailable("stream", "the stream listener lost its database connection")

// Watch is the server side of the Watch RPC. It sends every event with an id greater than
// afterID (afterID < 0: from the current head) whose kind is in kinds (empty: all), in id
// order, first from the table, then live from this process's listener (so Run must be
// running), with no gap or duplicate between the two. When nothing was sent for
// HeartbeatInterval it sends a heartbeat: send(nil, head), and it sends one as soon as the
// backlog is drained. head is the newest id the server
// knows of. The first heartbeat (caught up) waits until this process's listener is live, and
// the stream ends with Unavailable when the listener goes down: its heartbeats must never
// vouch for a stream that cannot deliver what is committed now (a LiveFollower would keep a
// cache answering from entries a change committed meanwhile made stale). It returns a
// *ResyncError when afterID (>= 0) is older than the retention window (or newer than the
// head: the database lost history), that Unavailable, the first error of send, or ctx.Err().
//
// A service's Watch handler calls it through ServeWatch.
func (s *Stream) Watch(ctx context.Context, afterID int64, kinds []string, send func(e *Event, head int64) error) error {
	match := func(e *Event) bool { return len(kinds) == 0 || slices.Contains(kinds, e.Kind) }
	cursor := afterID
	for {
		// Subscribe before reading the backlog: every event the listener delivers from now on
		// is queued, and every event it delivered before is committed, hence in the backlog.
		live := make(chan Event, s.watchBuffer)
		lagged := make(chan struct{})
		var dropped bool // only touched by the listener's goroutine
		unsubscribe := s.Subscribe(func(e Event) {
			if dropped {
				return
			}
			select {
			case live <- e:
			default:
				dropped = true
				close(lagged)
			}
		})
		err := s.watchPhases(ctx, &cursor, match, live, lagged, send)
		unsubscribe()
		if !errors.Is(err, errLagged) {
			return err
		}
	}
}

func (s *Stream) watchPhases(ctx context.Context, cursor *int64, match func(*Event) bool,
	live <-chan Event, lagged <-chan struct{}, send func(*Event, int64) error) error {
	head, err := Head(ctx, s.pool)
	if err != nil {
		return err
	}
	if *cursor < 0 {
		*cursor = head
	}
	if *cursor > head {
		// Every id a consumer holds came from a committed event, and head never goes down:
		// this database lost history (restored from a backup), so ids after the consumer's
		// position will be reused. Only a snapshot is safe.
		pruned, err := prunedThrough(ctx, s.pool)
		if err != nil {
			return err
		}
		return &ResyncError{OldestID: pruned}
	}

	// Backlog.
	for {
		// Ready is read before the rows: once it is closed, the listener delivers (to us: we
		// subscribed first) every event after its start position, which is at most the head
		// read next, so the rows and the live events leave no gap.
		ready := isClosed(s.Ready())
		h, err := Head(ctx, s.pool)
		if err != nil {
			return err
		}
		evs, err := readAfter(ctx, s.pool, *cursor, h, batchSize)
		if err != nil {
			return err
		}
		// Read after the rows: if nothing after the cursor was pruned by now, they are complete.
		pruned, err := prunedThrough(ctx, s.pool)
		if err != nil {
			return err
		}
		if *cursor < pruned {
			return &ResyncError{OldestID: pruned}
		}
		for i := range evs {
			e := &evs[i]
			*cursor = e.ID
			if match(e) {
				if err := send(e, max(head, e.ID)); err != nil {
					return err
				}
			}
		}
		if len(evs) < batchSize && ready {
			break
		}
		if len(evs) < batchSize {
			// The listener has no start position yet (a restarted replica takes RPCs before
			// Run is ready): live events would start after it, skipping what commits in
			// between (found by the kill tests, docs/reliability.md). Read again once ready.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.Ready():
			}
		}
	}

	// From here on the events come from the listener, so the stream delivers every change only
	// while the listener is live: "caught up" (the first heartbeat) waits until it is, and the
	// stream ends (Unavailable) as soon as it is not. A follower then drops its cache and stops
	// vouching for it, instead of being kept live by heartbeats while an event committed during
	// the listener's outage reaches no one (docs/reliability.md section 2). Until then nothing
	// is sent: events (nil channel) and heartbeats wait.
	up, changed := s.liveState()
	var events <-chan Event
	hb := time.NewTimer(s.opts.HeartbeatInterval)
	defer hb.Stop()
	// Caught up: say so at once, so a consumer knows its cache is live now rather than at the
	// first heartbeat (a cache that serves only while its stream is live would otherwise sit
	// idle for a whole interval after every connect).
	caughtUp := func() error {
		events = live
		hb.Reset(s.opts.HeartbeatInterval)
		return send(nil, max(head, *cursor))
	}
	if up {
		if err := caughtUp(); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-lagged:
			return errLagged
		case <-changed:
			if up {
				return errListenerDown
			}
			if up, changed = s.liveState(); up {
				if err := caughtUp(); err != nil {
					return err
				}
			}
		case <-hb.C:
			if up {
				if err := send(nil, max(s.Position(), *cursor)); err != nil {
					return err
				}
			}
			hb.Reset(s.opts.HeartbeatInterval)
		case e := <-events:
			if e.Op == OpResync {
				// The listener skipped pruned rows it had not read, so live events up to e.ID
				// may be missing: re-read the table (which decides whether this watcher must
				// resync too).
				return errLagged
			}
			if e.ID <= *cursor {
				continue // already sent from the backlog
			}
			*cursor = e.ID
			if !match(&e) {
				continue
			}
			if err := send(&e, max(s.Position(), e.ID)); err != nil {
				return err
			}
			hb.Reset(s.opts.HeartbeatInterval)
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
