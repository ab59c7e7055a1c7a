package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millwright/millwright/pkg/failpoint"
)

// Options tune a Stream; the zero value gives the defaults.
type Options struct {
	// PollInterval is how often the listener reads the outbox even without a notification: the
	// bound on the delay a lost notification can cause. Default 1s.
	PollInterval time.Duration
	// Retention is how long outbox rows are kept. Default 24h.
	Retention time.Duration
	// PruneInterval is how often Run prunes; negative disables pruning in Run (Prune can still
	// be called). Default 1m. Every replica may prune: concurrent prunes are safe.
	PruneInterval time.Duration
	// HeartbeatInterval is how long Watch stays silent before it sends a heartbeat. Default 15s.
	HeartbeatInterval time.Duration
	// StartAfter, when set, makes Run deliver every retained event after this id instead of
	// starting at the current head. Local caches start empty, so replaying history to them is
	// useless; this is for tools and tests.
	StartAfter *int64
	// Logger receives reconnects and prune errors. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time Prune removes and creates partitions at. Default time.Now; tests move it.
	Clock func() time.Time
}

// listenerAppName is the application_name of the LISTEN connection, so operators (and tests)
// can find it in pg_stat_activity.
const listenerAppName = "millwright_stream_listener"

const (
	minReconnect = 100 * time.Millisecond
	maxReconnect = 5 * time.Second
	// watchBuffer is how many live events a Watch may have queued before it is considered
	// lagging and falls back to reading the table (the listener never blocks on a watcher).
	defaultWatchBuffer = 1024
)

// Stream delivers the outbox of one database to in-process subscribers and to Watch callers.
// Create it with New and run Run in the background.
type Stream struct {
	pool *pgxpool.Pool
	opts Options
	log  *slog.Logger

	running   atomic.Bool
	pos       atomic.Int64
	started   bool // Run's goroutine only: the start position was set
	ready     chan struct{}
	readyOnce sync.Once
	live      atomic.Bool // a listener connection is up and has caught up
	// reconnects and resyncs count listener connections lost and resyncs told (metrics).
	reconnects, resyncs atomic.Int64

	mu       sync.Mutex
	subs     atomic.Pointer[[]*subscriber] // copy-on-write under mu; read lock-free by delivery
	advanced chan struct{}                 // under mu; closed (and replaced) when pos advances
	// liveChanged is closed (and replaced) under mu whenever live changes, so a Watch can stop
	// vouching for its stream the moment the listener goes down (see setLive).
	liveChanged chan struct{}

	watchBuffer  int
	minReconnect time.Duration
	noListen     bool // tests: measure the polling baseline
}

type subscriber struct {
	fn   func(Event)
	dead atomic.Bool
}

// New returns a Stream reading the outbox through pool. The LISTEN connection is opened
// separately with the pool's connection settings, so it does not take a pool slot.
func New(pool *pgxpool.Pool, opts Options) *Stream {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.Retention <= 0 {
		opts.Retention = 24 * time.Hour
	}
	if opts.PruneInterval == 0 {
		opts.PruneInterval = time.Minute
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	s := &Stream{
		pool:         pool,
		opts:         opts,
		log:          opts.Logger.With("component", "stream"),
		advanced:     make(chan struct{}),
		liveChanged:  make(chan struct{}),
		ready:        make(chan struct{}),
		watchBuffer:  defaultWatchBuffer,
		minReconnect: minReconnect,
	}
	s.subs.Store(&[]*subscriber{})
	return s
}

// Subscribe registers fn to be called with every event, synchronously from Run's goroutine, in
// id order, before Position moves past it (so WaitFor(id) returning means fn saw id). fn must
// be quick and must not block: it delays every other subscriber. After unsubscribe returns, fn
// is not called again (except for a call already in progress).
func (s *Stream) Subscribe(fn func(Event)) (unsubscribe func()) {
	sub := &subscriber{fn: fn}
	s.mu.Lock()
	old := *s.subs.Load()
	next := make([]*subscriber, len(old), len(old)+1)
	copy(next, old)
	s.subs.Store(new(append(next, sub)))
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			sub.dead.Store(true)
			s.mu.Lock()
			defer s.mu.Unlock()
			old := *s.subs.Load()
			next := make([]*subscriber, 0, len(old))
			for _, o := range old {
				if o != sub {
					next = append(next, o)
				}
			}
			s.subs.Store(&next)
		})
	}
}

// Ready is closed once Run has connected, listens and has set its start position: from then
// on every committed event reaches subscribers. A replica whose caches depend on the stream
// should report SERVING only after it.
func (s *Stream) Ready() <-chan struct{} { return s.ready }

// Live reports whether the listener is connected now and has caught up since it (re)connected.
// While it is not, events may be committed that subscribers have not seen, so a cache kept
// fresh by them must not answer from its entries: it is the gate for serving cached answers.
func (s *Stream) Live() bool { return s.live.Load() }

// setLive records whether the listener is live (Run's goroutine only) and wakes the Watch
// calls waiting on liveState. A Watch's heartbeats tell its followers "every change reaches
// you now", which holds only while this listener is live: a Watch that kept heart-beating
// through the listener's outage let a remote cache (roleset's) answer from entries that a
// change committed meanwhile had made stale, until the listener came back and delivered it
// (docs/reliability.md section 2, the stale "yes" after a Postgres restart).
func (s *Stream) setLive(v bool) {
	if s.live.Load() == v {
		return
	}
	s.mu.Lock()
	s.live.Store(v)
	close(s.liveChanged)
	s.liveChanged = make(chan struct{})
	s.mu.Unlock()
}

// liveState returns whether the listener is live and a channel closed when that changes.
func (s *Stream) liveState() (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live.Load(), s.liveChanged
}

// Position returns the id of the last event delivered to subscribers (or the head Run started
// from). 0 before Run has connected once.
func (s *Stream) Position() int64 { return s.pos.Load() }

// WaitFor blocks until Position() >= id (read-your-writes: after committing a change, wait for
// Head to be delivered before answering from a cache) or ctx is done.
func (s *Stream) WaitFor(ctx context.Context, id int64) error {
	for {
		s.mu.Lock()
		ch := s.advanced
		s.mu.Unlock()
		if s.pos.Load() >= id {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// setPosition publishes a new position and wakes WaitFor callers.
func (s *Stream) setPosition(p int64) {
	s.pos.Store(p)
	s.mu.Lock()
	close(s.advanced)
	s.advanced = make(chan struct{})
	s.mu.Unlock()
}

func (s *Stream) deliver(evs []Event) {
	for _, e := range evs {
		for _, sub := range *s.subs.Load() {
			if !sub.dead.Load() {
				sub.fn(e)
			}
		}
		s.pos.Store(e.ID)
	}
	if len(evs) > 0 {
		s.setPosition(evs[len(evs)-1].ID)
	}
}

// Run delivers events until ctx is done, then returns ctx.Err(). Connection failures are
// logged and retried with backoff, never returned. Only one Run per Stream at a time.
func (s *Stream) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("stream: Run is already running")
	}
	defer s.running.Store(false)

	var wg sync.WaitGroup
	defer wg.Wait()
	if s.opts.PruneInterval > 0 {
		wg.Go(func() { s.pruneLoop(ctx) })
	}

	bo := newBackoff(s.minReconnect, maxReconnect)
	for {
		err := s.listen(ctx, bo.reset)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := bo.next()
		s.reconnects.Add(1)
		s.log.Warn("stream listener lost its connection; reconnecting", "error", err, "retry_in", d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// listen runs one connection's life: LISTEN, catch up, then wait for notifications or the poll
// interval, catching up after each. It returns when the connection fails or ctx is done.
func (s *Stream) listen(ctx context.Context, connected func()) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = listenerAppName
	// Its statements are the same few with new positions each time: planned once. The
	// outbox read over every partition, custom-planned at each read, cost more than the read.
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("stream: connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if !s.noListen {
		// LISTEN before the first read: anything committed after the read is then notified.
		if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
			return fmt.Errorf("stream: listen: %w", err)
		}
	}
	if !s.started {
		start, err := s.startPosition(ctx, conn)
		if err != nil {
			return err
		}
		s.started = true
		s.setPosition(start)
	}
	s.readyOnce.Do(func() { close(s.ready) })
	connected()
	defer s.setLive(false)

	// wait is how long the next wait for a notification lasts. Only one committing writer at
	// a time notifies (UpgradeSQL), and an event is delivered only once the transactions open
	// at its draw have ended: after a read that delivered something, or found events not safe
	// yet, the listener reads again soon (quickPoll, doubling while nothing new comes), which
	// picks up the writers that committed just after the notifying one; idle, it falls back to
	// PollInterval.
	wait := s.opts.PollInterval
	b := &barrier{conn: conn}
	for {
		delivered, pending, err := s.catchUp(ctx, conn, b)
		if err != nil {
			return err
		}
		// Live only once this connection has delivered everything committed while the last
		// one was down: a cache may trust its entries again from here on.
		s.setLive(true)
		switch {
		case delivered:
			wait = quickPoll
		case pending || wait < s.opts.PollInterval:
			wait = min(2*wait, s.opts.PollInterval)
		}
		if err := s.waitNotification(ctx, conn, wait); err != nil {
			return err
		}
	}
}

// quickPoll is the listener's first re-read after it delivered events (see listen); readGap
// the least time between two safe heads that wait for commits in flight (see barrier).
const (
	quickPoll = 10 * time.Millisecond
	readGap   = 10 * time.Millisecond
)

// barrier is the listener's source of safe heads. A safe head that has to wait for commits in
// flight also holds back the writers that arrive meanwhile (UpgradeSQL), so a listener woken by
// every commit of a busy job path would stall it: such waiting heads are taken at most once per
// readGap, and the events between are delivered in batches, at most readGap later. When no
// commit is in flight the head is taken at once (tryHead), which stalls nobody: a lone write
// is delivered within a round trip of its commit.
type barrier struct {
	conn        *pgx.Conn
	lastWaiting time.Time
}

func (b *barrier) head(ctx context.Context) (int64, error) {
	if h, ok, err := tryHead(ctx, b.conn); err != nil || ok {
		return h, err
	}
	if gap := readGap - time.Since(b.lastWaiting); gap > 0 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(gap):
		}
	}
	b.lastWaiting = time.Now()
	return Head(ctx, b.conn)
}

func (s *Stream) startPosition(ctx context.Context, q Querier) (int64, error) {
	if s.opts.StartAfter != nil {
		return *s.opts.StartAfter, nil
	}
	return Head(ctx, q)
}

// waitNotification returns nil when a notification arrives or d passes, and an error when the
// connection failed or ctx is done.
func (s *Stream) waitNotification(ctx context.Context, conn *pgx.Conn, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if wctx.Err() != nil && pgconn.Timeout(err) {
				return nil // poll
			}
			return fmt.Errorf("stream: wait for notification: %w", err)
		}
		// A transaction's notifications arrive together, and one catch-up already read them
		// all: skip what is delivered instead of querying once per notification.
		if id, perr := strconv.ParseInt(n.Payload, 10, 64); perr == nil && id <= s.Position() {
			continue
		}
		return nil
	}
}

// catchUp delivers every safe event after Position, in id order. delivered says it delivered
// something; pending that committed events after the new Position are not safe yet.
func (s *Stream) catchUp(ctx context.Context, conn *pgx.Conn, b *barrier) (delivered, pending bool, err error) {
	for {
		pos := s.Position()
		head, err := b.head(ctx)
		if err != nil {
			return delivered, false, err
		}
		evs, err := readAfter(ctx, conn, pos, head, batchSize)
		if err != nil {
			return delivered, false, err
		}
		// Read after the rows: if nothing after pos was pruned by now, the rows are complete.
		pruned, err := prunedThrough(ctx, conn)
		if err != nil {
			return delivered, false, err
		}
		if pos < pruned {
			head, err := Head(ctx, conn)
			if err != nil {
				return delivered, false, err
			}
			s.log.Warn("stream listener fell behind the retention window; telling subscribers to resync",
				"position", pos, "pruned_through", pruned, "head", head)
			s.resyncs.Add(1)
			s.deliver([]Event{{ID: head, Op: OpResync, CreatedAt: time.Now()}})
			delivered = true
			continue
		}
		if len(evs) > 0 {
			failpoint.Hit("stream/listen/read") // read from the outbox, not yet delivered
		}
		s.deliver(evs)
		delivered = delivered || len(evs) > 0
		if len(evs) < batchSize {
			latest, err := Latest(ctx, conn)
			if err != nil {
				return delivered, false, err
			}
			return delivered, latest > s.Position(), nil
		}
	}
}

func (s *Stream) pruneLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.PruneInterval)
	defer t.Stop()
	for {
		if n, err := s.Prune(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("stream prune failed", "error", err)
		} else if n > 0 {
			s.log.Debug("stream pruned", "rows", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneDefaultSQL deletes one batch of expired rows of the default partition (rows written
// while no range partition covered their time: normally none) and raises pruned_through to the
// highest deleted id in the same statement, keeping "every deleted id <= pruned_through".
// SKIP LOCKED lets replicas prune concurrently without waiting on each other; greatest()
// keeps pruned_through from going down when they commit out of order.
const pruneDefaultSQL = `
WITH d AS (
    DELETE FROM stream_outbox_default WHERE id IN (
        SELECT id FROM stream_outbox_default
         WHERE created_at < $1
         ORDER BY id LIMIT $2
           FOR UPDATE SKIP LOCKED)
    RETURNING id
), u AS (
    UPDATE stream_state SET pruned_through = greatest(pruned_through, (SELECT max(id) FROM d))
     WHERE EXISTS (SELECT 1 FROM d)
)
SELECT count(*) FROM d`

// partitionsSQL lists the range partitions of the outbox with their bounds (NULL lower bound:
// MINVALUE), oldest first.
const partitionsSQL = `
SELECT c.relname,
       (regexp_match(b, 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
       (regexp_match(b, 'TO \(''([^'']*)''\)'))[1]::timestamptz
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) AS b
WHERE i.inhparent = 'stream_outbox'::regclass AND b <> 'DEFAULT'
ORDER BY 3`

// partitionLock serialises partition maintenance between replicas (a try-lock: a replica that
// finds it taken skips its pass).
const partitionLock = 7294013770136241412

// PartitionPeriod is the time span of one outbox partition: a quarter of the retention, at
// least a minute, so about five partitions exist at a time and a row outlives the retention by
// at most one period.
func PartitionPeriod(retention time.Duration) time.Duration {
	return max(retention/4, time.Minute).Truncate(time.Second)
}

// Prune removes the outbox rows older than Options.Retention at the clock's time
// (Options.Clock): every range partition whose range ended before then is dropped whole, after
// pruned_through is raised to its highest id in the same transaction (a consumer resuming
// from a dropped id is told to resync), and the expired rows of the default partition are
// deleted; then it creates the partitions of the next two periods. Run calls it every
// PruneInterval; replicas skip a pass another one is making. It returns the number of
// partitions dropped plus rows deleted from the default partition.
//
// Dropping a partition takes an ACCESS EXCLUSIVE lock on the outbox for an instant (every
// writer of an event waits for it); lock_timeout bounds the wait at 100 ms, and a pass that
// times out leaves the partition to the next one.
func (s *Stream) Prune(ctx context.Context) (int64, error) {
	now := s.opts.Clock()
	cutoff := now.Add(-s.opts.Retention)
	var total int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(partitionLock)).Scan(&got); err != nil || !got {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, partitionsSQL)
		if err != nil {
			return err
		}
		type part struct {
			name   string
			lo, hi *time.Time
		}
		parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (part, error) {
			var p part
			return p, r.Scan(&p.name, &p.lo, &p.hi)
		})
		if err != nil {
			return err
		}
		var last time.Time
		for _, p := range parts {
			if p.hi != nil && !p.hi.After(cutoff) {
				if _, err := tx.Exec(ctx, `UPDATE stream_state SET pruned_through = greatest(pruned_through,
					(SELECT coalesce(max(id), 0) FROM `+pgx.Identifier{p.name}.Sanitize()+`))`); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{p.name}.Sanitize()); err != nil {
					return err
				}
				total++
				continue
			}
			if p.hi != nil && p.hi.After(last) {
				last = *p.hi
			}
		}
		// The next partitions continue the chain; after a long stop (or a clock moved ahead)
		// they start at the current period, and never below a row of the default partition
		// (creating a range over its rows would fail).
		period := PartitionPeriod(s.opts.Retention)
		var defMax *time.Time
		if err := tx.QueryRow(ctx, `SELECT max(created_at) FROM stream_outbox_default`).Scan(&defMax); err != nil {
			return err
		}
		from := last
		if from.Before(now.Add(-period)) {
			from = now.Truncate(period)
		}
		if defMax != nil && !from.After(*defMax) {
			from = defMax.Add(time.Second).Truncate(time.Second)
		}
		for ; from.Before(now.Add(2 * period)); from = from.Add(period) {
			name := "stream_outbox_p" + from.UTC().Format("20060102t150405")
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF stream_outbox FOR VALUES FROM ('%s') TO ('%s')`,
				pgx.Identifier{name}.Sanitize(), from.UTC().Format(time.RFC3339Nano), from.Add(period).UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("stream: prune partitions: %w", err)
	}
	for {
		var n int64
		err := s.pool.QueryRow(ctx, pruneDefaultSQL, cutoff, batchSize).Scan(&n)
		if err != nil {
			return total, fmt.Errorf("stream: prune: %w", err)
		}
		total += n
		if n < batchSize {
			return total, nil
		}
	}
}

// backoff is exponential with jitter, so replicas that lost the database together do not
// reconnect in lockstep.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(minD, maxD time.Duration) *backoff {
	return &backoff{min: minD, max: maxD, cur: minD}
}

func (b *backoff) reset() { b.cur = b.min }

// next returns a delay in [cur/2, cur] and doubles cur up to max.
func (b *backoff) next() time.Duration {
	d := b.cur/2 + rand.N(b.cur/2+1)
	b.cur = min(2*b.cur, b.max)
	return d
}

// sleep waits d or until ctx is done; false means ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
