package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Config is what a Recorder needs.
type Config struct {
	Store   *Store
	Hasher  *Hasher // nil: secrets are recorded as "redacted" and HashAuditValue is refused
	Service string
	Replica string
	// Window is the repeat window: a decision identical to one recorded less than Window ago
	// is counted, not written, and the count is written when the window ends (default 1 s;
	// negative: every decision is written).
	Window time.Duration
	// FailOpen lists the classes whose calls are answered even when their event cannot be
	// written (the failure is logged with the event). Every other class fails closed.
	FailOpen map[Class]bool
	// MaxRepeatKeys bounds the decisions tracked for the repeat window (default 10,000);
	// beyond it a repeat is written as its own event.
	MaxRepeatKeys int
	Logger        *slog.Logger
	now           func() time.Time // tests
}

// Recorder writes a service's events: each decision before its answer (group commit: callers
// that arrive while a write is in flight share the next one), repeats at the window's end.
type Recorder struct {
	cfg Config

	mu      sync.Mutex
	repeats map[string]*repeat // by decision key (Event.appendDecisionKey)
	pending []*write
	writing bool

	stop chan struct{}
	done chan struct{}
	n    counters
}

// repeat is a decision written at recorded; count identical ones came after it, between
// first and last, and are not written yet.
type repeat struct {
	recorded    time.Time
	event       Event
	count       int64
	first, last time.Time
}

type write struct {
	events []Event
	err    error
	done   chan struct{}
}

// NewRecorder returns a Recorder; Close writes what it still counts.
func NewRecorder(cfg Config) *Recorder {
	if cfg.Window == 0 {
		cfg.Window = time.Second
	}
	if cfg.MaxRepeatKeys <= 0 {
		cfg.MaxRepeatKeys = 10_000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	r := &Recorder{cfg: cfg, repeats: map[string]*repeat{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.flushLoop()
	return r
}

// FailsClosed reports whether calls of class c are refused when their event cannot be written.
func (r *Recorder) FailsClosed(c Class) bool { return !r.cfg.FailOpen[c] }

// Hasher returns the recorder's keyed hash, or nil.
func (r *Recorder) Hasher() *Hasher { return r.cfg.Hasher }

// Store returns the trail.
func (r *Recorder) Store() *Store { return r.cfg.Store }

// Service returns the service name events carry.
func (r *Recorder) Service() string { return r.cfg.Service }

// Record records e: written before Record returns, or counted as a repeat of a decision
// written less than the window ago. The error is the write's; the caller decides with
// FailsClosed whether to answer anyway.
func (r *Recorder) Record(ctx context.Context, e Event) error {
	now := r.cfg.now()
	if e.Time.IsZero() {
		e.Time = now
	}
	e.LastTime, e.Count, e.Service, e.Replica = e.Time, 1, r.cfg.Service, r.cfg.Replica
	if e.Outcome == Requested || r.cfg.Window < 0 {
		return r.write(ctx, []Event{e})
	}
	kb, _ := keyBuffers.Get().(*[]byte) // the pool holds nothing else
	defer keyBuffers.Put(kb)
	key := e.appendDecisionKey((*kb)[:0])
	*kb = key // keep what it grew to
	r.mu.Lock()
	// string(key) in an index expression does not allocate: only a new entry copies the key.
	if rp, ok := r.repeats[string(key)]; ok && now.Sub(rp.recorded) < r.cfg.Window {
		if rp.count == 0 {
			rp.first = e.Time
		}
		rp.count++
		rp.last = e.Time
		r.mu.Unlock()
		r.n.repeats.Add(1)
		return nil
	}
	r.mu.Unlock()
	if err := r.write(ctx, []Event{e}); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rp, ok := r.repeats[string(key)]; ok && rp.count > 0 {
		return nil // a repeat counted meanwhile: its window runs from the earlier write
	}
	if len(r.repeats) < r.cfg.MaxRepeatKeys {
		r.repeats[string(key)] = &repeat{recorded: now, event: e}
	}
	return nil
}

// keyBuffers hold the decision keys being looked up, so the warm path of a repeat allocates
// none.
var keyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// write appends events with the next group commit and waits for it.
func (r *Recorder) write(ctx context.Context, events []Event) error {
	w := &write{events: events, done: make(chan struct{})}
	r.mu.Lock()
	r.pending = append(r.pending, w)
	if !r.writing {
		r.writing = true
		go r.writeLoop()
	}
	r.mu.Unlock()
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeTimeout bounds one group commit; it outlives any one caller's context.
const writeTimeout = 10 * time.Second

func (r *Recorder) writeLoop() {
	for {
		r.mu.Lock()
		batch := r.pending
		r.pending = nil
		if len(batch) == 0 {
			r.writing = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		var events []Event
		for _, w := range batch {
			events = append(events, w.events...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := r.cfg.Store.Append(ctx, events)
		cancel()
		if err != nil {
			err = errors.Join(ErrUnavailable, err)
			r.n.failures.Add(1)
		} else {
			r.n.written.Add(uint64(len(events)))
		}
		for _, w := range batch {
			w.err = err
			close(w.done)
		}
	}
}

// ErrUnavailable wraps every failed write.
var ErrUnavailable = errors.New("audit: the trail cannot be written")

// flushLoop writes the counted repeats of every window that ended.
func (r *Recorder) flushLoop() {
	defer close(r.done)
	if r.cfg.Window < 0 {
		<-r.stop
		return
	}
	t := time.NewTicker(r.cfg.Window / 2)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			r.flush(true)
			return
		case <-t.C:
			r.flush(false)
		}
	}
}

// flush writes the repeats of ended windows (all of them when final) as events with their
// count, and forgets the decisions whose window ended.
func (r *Recorder) flush(final bool) {
	now := r.cfg.now()
	var out []Event
	r.mu.Lock()
	for k, rp := range r.repeats {
		if !final && now.Sub(rp.recorded) < r.cfg.Window {
			continue
		}
		if rp.count > 0 {
			e := rp.event
			e.Time, e.LastTime, e.Count, e.RequestID, e.TraceID = rp.first, rp.last, rp.count, "", ""
			out = append(out, e)
		}
		delete(r.repeats, k)
	}
	r.mu.Unlock()
	if len(out) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := r.write(ctx, out); err != nil {
		r.cfg.Logger.Error("audit: writing repeat counts", "events", len(out), "err", err)
	}
}

// Close writes the repeats still counted and stops.
func (r *Recorder) Close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}
