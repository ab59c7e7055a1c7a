package stream

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// DefaultSilence is how long a connected Watch stream may stay silent before a LiveFollower
// stops vouching for it: three of the server's default heartbeat intervals (15 s).
const DefaultSilence = 45 * time.Second

// LiveOptions configure a LiveFollower. Open, Apply and Drop are required.
type LiveOptions struct {
	// Open opens a Watch stream; a LiveFollower always opens from the head (afterID -1).
	Open Opener
	// Apply drops what one event may have changed.
	Apply func(Event)
	// Drop drops everything: called when a stream breaks or asks for a resync (events may now
	// pass unseen) and when a new stream becomes live (what was read before it may predate an
	// event it will never deliver).
	Drop func()
	// Silence: a connected stream that delivered nothing (heartbeats included) for this long
	// is no longer live. Default DefaultSilence.
	Silence time.Duration
	// MinBackoff, MaxBackoff and Logger are Follow's.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

// LiveFollower follows another process's Watch stream for a cache (revcache) and says whether
// the cache may answer: Live is true once the current stream has delivered a message (the
// server has fixed its starting head, so every change committed from then on is delivered)
// and for Silence after each message. It holds no position across streams: every new stream
// starts from the head, and Drop empties the cache at each break and each new start, so a
// revoke committed while no stream was delivering can never be answered from an entry.
type LiveFollower struct {
	o         LiveOptions
	connected atomic.Bool
	lastMsg   atomic.Int64 // unix nanos
	pos       atomic.Int64
	resyncs   atomic.Int64
}

// NewLiveFollower returns a follower; call Run.
func NewLiveFollower(o LiveOptions) *LiveFollower {
	if o.Silence <= 0 {
		o.Silence = DefaultSilence
	}
	f := &LiveFollower{o: o}
	f.pos.Store(-1)
	return f
}

// Live reports whether the current stream is delivering: connected, and heard from within
// Silence. This is the Live function of the caches the follower keeps honest.
func (f *LiveFollower) Live() bool {
	return f.connected.Load() && time.Since(time.Unix(0, f.lastMsg.Load())) < f.o.Silence
}

// Position returns the id of the last event applied (-1 before any); diagnostics and tests.
func (f *LiveFollower) Position() int64 { return f.pos.Load() }

// Resyncs returns how many times a stream asked for a resync (diagnostics and tests).
func (f *LiveFollower) Resyncs() int64 { return f.resyncs.Load() }

// Run follows until ctx is done, then returns ctx.Err(), leaving the cache dropped.
func (f *LiveFollower) Run(ctx context.Context) error {
	if f.o.Open == nil || f.o.Apply == nil || f.o.Drop == nil {
		return errors.New("stream: LiveFollower needs Open, Apply and Drop")
	}
	defer f.down()
	return Follow(ctx, FollowOptions{
		Open: func(ctx context.Context, _ int64) (Receiver, error) {
			f.down() // not live until this stream delivers
			r, err := f.o.Open(ctx, -1)
			if err != nil {
				return nil, err
			}
			return liveReceiver{r: r, f: f}, nil
		},
		After: func(context.Context) (int64, error) { return -1, nil },
		Apply: func(_ context.Context, e Event) error {
			f.o.Apply(e)
			f.pos.Store(e.ID)
			return nil
		},
		Resync: func(context.Context) (int64, error) {
			f.resyncs.Add(1)
			f.down()
			return -1, nil
		},
		MinBackoff: f.o.MinBackoff,
		MaxBackoff: f.o.MaxBackoff,
		Logger:     f.o.Logger,
	})
}

// down marks the stream not live, then drops the cache: a fill between the two sees "not
// live" and is not stored.
func (f *LiveFollower) down() {
	f.connected.Store(false)
	f.o.Drop()
}

type liveReceiver struct {
	r Receiver
	f *LiveFollower
}

func (r liveReceiver) Recv() (*commonv1.Event, int64, error) {
	ev, head, err := r.r.Recv()
	if err != nil {
		r.f.down()
		return nil, 0, err
	}
	r.f.lastMsg.Store(time.Now().UnixNano())
	if !r.f.connected.Load() {
		// First message of this stream: drop what was read before (it may predate an event
		// this stream starts after), then vouch for what is read from now on.
		r.f.o.Drop()
		r.f.connected.Store(true)
	}
	return ev, head, nil
}

// WatchResponse is what every service's generated WatchResponse offers.
type WatchResponse interface {
	GetEvent() *commonv1.Event
	GetHeadId() int64
}

// Receive adapts a generated Watch client stream (grpc.ServerStreamingClient of a
// WatchResponse) to Receiver.
func Receive[M WatchResponse](s interface{ Recv() (M, error) }) Receiver {
	return recvAdapter[M]{s}
}

type recvAdapter[M WatchResponse] struct {
	s interface{ Recv() (M, error) }
}

func (a recvAdapter[M]) Recv() (*commonv1.Event, int64, error) {
	m, err := a.s.Recv()
	if err != nil {
		return nil, 0, err
	}
	return m.GetEvent(), m.GetHeadId(), nil
}
