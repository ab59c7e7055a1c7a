package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

// writeConcurrently runs writers x perWriter transactions; every 7th rolls back and every 5th
// writes two events. It returns the number of committed events.
func writeConcurrently(t *testing.T, pool *pgxpool.Pool, writers, perWriter int) int {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	counts := make([]int, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					n := 1
					if i%5 == 0 {
						n = 2
					}
					for j := range n {
						if _, err := tx.Exec(ctx, `INSERT INTO item (name) VALUES ($1)`, fmt.Sprintf("w%d-%d-%d", w, i, j)); err != nil {
							return err
						}
					}
					if i%7 == 3 {
						return errRollback
					}
					counts[w] += n
					return nil
				})
				if err != nil && !errors.Is(err, errRollback) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	return total
}

var errRollback = fmt.Errorf("deliberate rollback")

func TestConcurrentWritersDeliveredInOrderExactlyOnce(t *testing.T) {
	leakCheck(t)
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{})
	var got collector
	var order []int64 // checked as delivered, not only at the end
	var bad error
	defer s.Subscribe(func(e stream.Event) {
		if n := len(order); n > 0 && e.ID <= order[n-1] && bad == nil {
			bad = fmt.Errorf("id %d delivered after %d", e.ID, order[n-1])
		}
		order = append(order, e.ID)
		got.add(e)
	})()
	startStream(t, s)

	committed := writeConcurrently(t, pool, 8, 100)
	waitHead(t, s, pool)

	delivered := ids(got.events())
	require.NoError(t, bad)
	requireStrictlyIncreasing(t, delivered)
	require.Len(t, delivered, committed)
	require.Equal(t, outboxIDs(t, pool), delivered, "every committed event exactly once")
	t.Logf("%d events from 8 concurrent writers delivered in order", committed)
}

func TestTwoReplicasSeeEveryEvent(t *testing.T) {
	leakCheck(t)
	dsn := newDB(t)
	pools := []*pgxpool.Pool{pgtest.Pool(t, dsn), pgtest.Pool(t, dsn)}
	streams := make([]*stream.Stream, 2)
	got := make([]*collector, 2)
	for i, p := range pools {
		streams[i] = stream.New(p, stream.Options{})
		got[i] = &collector{}
		defer streams[i].Subscribe(got[i].add)()
		startStream(t, streams[i])
	}
	committed := writeConcurrently(t, pools[0], 4, 25)
	want := outboxIDs(t, pools[0])
	require.Len(t, want, committed)
	for i := range streams {
		waitHead(t, streams[i], pools[i])
		require.Equal(t, want, ids(got[i].events()), "replica %d", i)
	}
}

// listenerPID finds the listener's backend (the test's database has one Stream).
func listenerPID(t *testing.T, su *pgx.Conn, db string) int32 {
	t.Helper()
	var pid int32
	require.Eventually(t, func() bool {
		err := su.QueryRow(context.Background(),
			`SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
			db, stream.ListenerAppName).Scan(&pid)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return pid
}

// outage is a stream (not started) over a fresh database that delivers only through its
// listener (no polling within a test) and takes >= 200ms to reconnect, so an event committed
// right after kill surely lands while no listener exists; su, a superuser connection, kills it.
type outage struct {
	dsn, db string
	pool    *pgxpool.Pool
	s       *stream.Stream
	su      *pgx.Conn
}

func newOutage(t *testing.T) *outage {
	t.Helper()
	o := &outage{dsn: newDB(t)}
	o.db = dbName(t, o.dsn)
	o.pool = pgtest.Pool(t, o.dsn)
	o.s = stream.New(o.pool, stream.Options{PollInterval: time.Hour})
	stream.SetMinReconnect(o.s, 400*time.Millisecond)
	su, err := pgx.Connect(context.Background(), pgtest.Superuser(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = su.Close(context.Background()) })
	o.su = su
	return o
}

// kill terminates the listener's connection and returns the pid it had.
func (o *outage) kill(t *testing.T) int32 {
	t.Helper()
	pid := listenerPID(t, o.su, o.db)
	var ok bool
	require.NoError(t, o.su.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok))
	require.True(t, ok)
	return pid
}

func TestEventCommittedWhileListenerDeadIsDelivered(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	// Only the catch-up after reconnecting can deliver.
	o := newOutage(t)
	pool, s, su, db := o.pool, o.s, o.su, o.db
	var got collector
	defer s.Subscribe(got.add)()
	startStream(t, s)

	for round := range 3 {
		pid := o.kill(t)
		start := time.Now()
		insertItem(t, pool, fmt.Sprintf("while-dead-%d", round)) // its NOTIFY reaches no one
		var listeners int
		require.NoError(t, su.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
			db, stream.ListenerAppName).Scan(&listeners))
		require.Zero(t, listeners, "the event must be committed while no listener exists")
		head := waitHead(t, s, pool)
		took := time.Since(start)
		require.Less(t, took, 5*time.Second)
		require.Equal(t, head, got.events()[len(got.events())-1].ID)
		require.NotEqual(t, pid, listenerPID(t, su, db), "a new listener connection")
		t.Logf("round %d: delivered %v after the commit (reconnect backoff 200-400ms)", round, took.Round(time.Millisecond))
	}
	// And notifications work again on the new connection.
	insertItem(t, pool, "after")
	waitHead(t, s, pool)
	require.Len(t, got.events(), 4)
}

// TestLiveFollowsTheListener: Live is false before the first catch-up, false from the moment
// the listener's connection dies until a new one has caught up (an event committed meanwhile is
// delivered before Live is true again), so caches never answer from entries the outage may
// have made stale.
func TestLiveFollowsTheListener(t *testing.T) {
	leakCheck(t)
	o := newOutage(t)
	pool, s := o.pool, o.s
	var got collector
	var liveAtDelivery []bool
	var mu sync.Mutex
	defer s.Subscribe(func(e stream.Event) {
		mu.Lock()
		liveAtDelivery = append(liveAtDelivery, s.Live())
		mu.Unlock()
		got.add(e)
	})()
	require.False(t, s.Live(), "not live before Run")
	startStream(t, s)
	require.Eventually(t, s.Live, 5*time.Second, 5*time.Millisecond)
	metrics := s.Collectors("test") // live, position, reconnects, resyncs
	require.InDelta(t, 1.0, testutil.ToFloat64(metrics[0]), 0)
	require.Zero(t, testutil.ToFloat64(metrics[2]))

	o.kill(t)
	require.Eventually(t, func() bool { return !s.Live() }, 5*time.Second, time.Millisecond, "not live once the connection died")
	require.InDelta(t, 0.0, testutil.ToFloat64(metrics[0]), 0)
	insertItem(t, pool, "while-down")
	require.False(t, s.Live(), "still down: the reconnect backoff is 200-400ms")
	head := waitHead(t, s, pool)
	require.Eventually(t, s.Live, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, head, got.events()[len(got.events())-1].ID)
	require.InDelta(t, float64(head), testutil.ToFloat64(metrics[1]), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(metrics[2]), 0, "one reconnect")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{false}, liveAtDelivery, "the missed event is delivered before the stream is live again")
}

func TestPollingDeliversWithoutNotification(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{PollInterval: 100 * time.Millisecond})
	var got collector
	defer s.Subscribe(got.add)()
	startStream(t, s)
	// Let several poll timeouts pass first: the connection must survive them.
	time.Sleep(350 * time.Millisecond)
	// Written without stream_append: no NOTIFY at all, as if it was lost.
	_, err := pool.Exec(ctx, `INSERT INTO stream_outbox (kind, key, op) VALUES ('item', 'x', 'insert')`)
	require.NoError(t, err)
	start := time.Now()
	waitHead(t, s, pool)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Len(t, got.events(), 1)
}

func TestListenerBehindRetentionTellsSubscribersToResync(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	for i := range 5 {
		insertItem(t, pool, fmt.Sprint(i))
	}
	pruner := stream.New(pool, stream.Options{Retention: time.Nanosecond, PruneInterval: -1, Clock: twoDaysAhead})
	n, err := pruner.Prune(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the partition of the 5 rows is dropped")
	insertItem(t, pool, "kept")
	head, err := stream.Head(ctx, pool)
	require.NoError(t, err)
	require.EqualValues(t, 6, head)

	zero := int64(0)
	s := stream.New(pool, stream.Options{StartAfter: &zero, PruneInterval: -1})
	var got collector
	defer s.Subscribe(got.add)()
	startStream(t, s)
	waitHead(t, s, pool)
	evs := got.events()
	require.Len(t, evs, 1)
	require.Equal(t, stream.OpResync, evs[0].Op)
	require.Equal(t, head, evs[0].ID)
}

func TestConcurrentPrune(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	_, err := pool.Exec(ctx, `INSERT INTO item (name) SELECT 'n' || g FROM generate_series(1, 3500) g`)
	require.NoError(t, err)
	head, err := stream.Head(ctx, pool)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	for range 4 {
		wg.Go(func() {
			s := stream.New(pool, stream.Options{Retention: time.Nanosecond, PruneInterval: -1, Clock: twoDaysAhead})
			n, err := s.Prune(ctx)
			if !assertNoError(t, err) {
				return
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, total, "the partition of the rows is dropped once")
	var pruned int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pruned_through FROM stream_state`).Scan(&pruned))
	require.Equal(t, head, pruned)
	h2, err := stream.Head(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, head, h2, "head survives an empty outbox")
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestUnsubscribe(t *testing.T) {
	leakCheck(t)
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{})
	var a, b collector
	unsubA := s.Subscribe(a.add)
	defer s.Subscribe(b.add)()
	startStream(t, s)
	insertItem(t, pool, "1")
	waitHead(t, s, pool)
	unsubA()
	unsubA() // idempotent
	insertItem(t, pool, "2")
	waitHead(t, s, pool)
	require.Len(t, a.events(), 1)
	require.Len(t, b.events(), 2)
}

func TestRunTwice(t *testing.T) {
	leakCheck(t)
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{})
	startStream(t, s)
	require.Error(t, s.Run(context.Background()))
}

// localWatch opens s.Watch in this process as a Receiver (what a service's Watch RPC and its
// client adapter do over gRPC): the stream ends with Watch's error.
func localWatch(s *stream.Stream) stream.Opener {
	return func(ctx context.Context, after int64) (stream.Receiver, error) {
		msgs := make(chan watchMsg)
		go func() {
			err := s.Watch(ctx, after, nil, func(e *stream.Event, head int64) error {
				var pe *commonv1.Event
				if e != nil {
					pe = stream.ToProto(e)
				}
				select {
				case msgs <- watchMsg{ev: pe, head: head}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if err == nil {
				err = errors.New("watch ended")
			}
			select {
			case msgs <- watchMsg{err: err}:
			case <-ctx.Done():
			}
		}()
		return watchRecv{ctx: ctx, msgs: msgs}, nil
	}
}

type watchMsg struct {
	ev   *commonv1.Event
	head int64
	err  error
}

type watchRecv struct {
	ctx  context.Context
	msgs <-chan watchMsg
}

func (r watchRecv) Recv() (*commonv1.Event, int64, error) {
	select {
	case m := <-r.msgs:
		return m.ev, m.head, m.err
	case <-r.ctx.Done():
		return nil, 0, r.ctx.Err()
	}
}

// TestWatchIsNotLiveWhileItsListenerIsDown: the finding of docs/reliability.md section 2. A
// Watch's heartbeats kept a LiveFollower live while the serving process's own listener had lost
// its connection, so an event committed then (a revoke) reached no one, and the follower's
// cache answered from entries the event made stale until the listener was back. The follower
// must not be live while an event committed is not delivered: the Watch ends when its
// listener goes down, and a new Watch says it is caught up only once the listener is live.
func TestWatchIsNotLiveWhileItsListenerIsDown(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	o := newOutage(t)
	// Heartbeats far more often than the listener reconnects (1-2 s).
	o.s = stream.New(o.pool, stream.Options{PollInterval: time.Hour, HeartbeatInterval: 20 * time.Millisecond})
	stream.SetMinReconnect(o.s, 2*time.Second)
	startStream(t, o.s)
	require.Eventually(t, o.s.Live, 5*time.Second, 5*time.Millisecond)

	var drops atomic.Int64
	f := stream.NewLiveFollower(stream.LiveOptions{
		Open: localWatch(o.s), Apply: func(stream.Event) {}, Drop: func() { drops.Add(1) },
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	defer func() { cancel(); require.ErrorIs(t, <-done, context.Canceled) }()
	require.Eventually(t, f.Live, 5*time.Second, 5*time.Millisecond)

	for round := range 2 {
		o.kill(t)
		require.Eventually(t, func() bool { return !o.s.Live() }, 5*time.Second, time.Millisecond)
		insertItem(t, o.pool, fmt.Sprintf("revoke-%d", round)) // reaches no listener
		rev, err := stream.Head(ctx, o.pool)
		require.NoError(t, err)
		// Until the listener is back (1-2 s), the follower must not vouch for its cache.
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if f.Live() && f.Position() < rev {
				t.Fatalf("round %d: follower live at position %d while event %d, committed with the server's listener down, is not delivered",
					round, f.Position(), rev)
			}
			time.Sleep(2 * time.Millisecond)
		}
		// Once the listener is back, the follower is live again, its cache dropped since.
		before := drops.Load()
		require.Eventually(t, f.Live, 10*time.Second, 5*time.Millisecond)
		require.Greater(t, drops.Load(), before)
		insertItem(t, o.pool, fmt.Sprintf("after-%d", round))
		after, err := stream.Head(ctx, o.pool)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return f.Position() >= after }, 10*time.Second, 5*time.Millisecond,
			"events after the outage are delivered")
	}
}
