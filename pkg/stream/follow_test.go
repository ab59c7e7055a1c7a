package stream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

// grpcServer serves policyEvents on addr ("127.0.0.1:0" the first time); stop kills every
// stream at once (as a crashing server would).
type grpcServer struct {
	addr string
	srv  *grpc.Server
	done chan struct{}
}

func serve(t *testing.T, s *stream.Stream, addr string) *grpcServer {
	t.Helper()
	var lis net.Listener
	var err error
	require.Eventually(t, func() bool { lis, err = net.Listen("tcp", addr); return err == nil }, 5*time.Second, 20*time.Millisecond)
	g := &grpcServer{addr: lis.Addr().String(), srv: grpc.NewServer(), done: make(chan struct{})}
	policyv1.RegisterEventServiceServer(g.srv, &policyEvents{stream: s})
	go func() { defer close(g.done); _ = g.srv.Serve(lis) }()
	t.Cleanup(g.stop)
	return g
}

func (g *grpcServer) stop() { g.srv.Stop(); <-g.done }

// durable is a consumer that stores its position and its effects in one transaction.
type durable struct {
	pool     *pgxpool.Pool
	name     string
	failOnce atomic.Int64 // an event id whose first Apply fails after writing (rolled back)
	resyncs  atomic.Int64
}

func newDurable(t *testing.T, pool *pgxpool.Pool, name string) *durable {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO consumer VALUES ($1, 0)`, name)
	require.NoError(t, err)
	return &durable{pool: pool, name: name}
}

func (d *durable) after(ctx context.Context) (int64, error) {
	var id int64
	err := d.pool.QueryRow(ctx, `SELECT last_id FROM consumer WHERE name = $1`, d.name).Scan(&id)
	return id, err
}

func (d *durable) apply(ctx context.Context, e stream.Event) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO applied VALUES ($1, $2, $3)`, d.name, e.ID, e.Kind); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE consumer SET last_id = $2 WHERE name = $1`, d.name, e.ID); err != nil {
			return err
		}
		if d.failOnce.CompareAndSwap(e.ID, 0) {
			return errors.New("injected apply failure")
		}
		return nil
	})
}

// resync "rebuilds from a snapshot": here, jump to the producer's head (same database).
func (d *durable) resync(ctx context.Context) (int64, error) {
	d.resyncs.Add(1)
	var head int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		h, err := stream.Head(ctx, tx)
		if err != nil {
			return err
		}
		head = h
		_, err = tx.Exec(ctx, `UPDATE consumer SET last_id = $2 WHERE name = $1`, d.name, h)
		return err
	})
	return head, err
}

func (d *durable) appliedIDs(t *testing.T) []int64 {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `SELECT event_id FROM applied WHERE consumer = $1 ORDER BY event_id`, d.name)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return out
}

func (d *durable) waitApplied(t *testing.T, id int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		a, err := d.after(context.Background())
		return err == nil && a >= id
	}, 20*time.Second, 10*time.Millisecond, "consumer did not reach %d", id)
}

// follow runs Follow against addr until the returned stop is called.
func (d *durable) follow(t *testing.T, addr string) (stop func()) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- stream.Follow(ctx, stream.FollowOptions{
			Open:       policyOpener(policyv1.NewEventServiceClient(cc)),
			After:      d.after,
			Apply:      d.apply,
			Resync:     d.resync,
			MinBackoff: 20 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond,
		})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
			require.NoError(t, cc.Close())
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestFollowSurvivesServerAndConsumerRestarts(t *testing.T) {
	leakCheck(t)
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{HeartbeatInterval: 100 * time.Millisecond})
	startStream(t, s)
	srv := serve(t, s, "127.0.0.1:0")
	d := newDurable(t, pool, "billing")

	// Writers run throughout: some events are committed while no stream is open at all.
	writing := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-writing:
					return
				default:
				}
				if _, err := pool.Exec(context.Background(), `INSERT INTO item (name) VALUES ($1)`, fmt.Sprint(w, "-", i)); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}

	// A failing Apply of event 70: rolled back, retried from the stored position. Armed before
	// the consumer starts: armed after it applied 50, a loaded machine had it past 70 already.
	d.failOnce.Store(70)
	stopFollow := d.follow(t, srv.addr)
	d.waitApplied(t, 100)

	srv.stop() // every stream dies mid-flight
	time.Sleep(150 * time.Millisecond)
	srv = serve(t, s, srv.addr) // same address: the client reconnects by itself
	d.waitApplied(t, 200)

	stopFollow() // the consumer process restarts
	time.Sleep(50 * time.Millisecond)
	stopFollow = d.follow(t, srv.addr)
	d.waitApplied(t, 300)

	close(writing)
	wg.Wait()
	head := waitHead(t, s, pool)
	d.waitApplied(t, head)
	stopFollow()

	want := outboxIDs(t, pool)
	got := d.appliedIDs(t)
	// applied has no unique key, so an event applied twice would show twice here. (A count of
	// Apply calls cannot tell: a consumer stopped mid-commit may or may not have committed.)
	require.Equal(t, want, got, "every event applied exactly once")
	require.Zero(t, d.failOnce.Load(), "the injected failure happened")
	require.Zero(t, d.resyncs.Load())
	t.Logf("%d events applied exactly once across a server restart, a consumer restart and an Apply failure", len(got))
}

func TestFollowResyncsWhenBehindTheWindow(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	pool := pgtest.Pool(t, newDB(t))
	s := stream.New(pool, stream.Options{Retention: time.Nanosecond, PruneInterval: -1, Clock: twoDaysAhead})
	startStream(t, s)
	srv := serve(t, s, "127.0.0.1:0")
	for i := range 10 {
		insertItem(t, pool, fmt.Sprint(i))
	}
	_, err := s.Prune(ctx)
	require.NoError(t, err)
	d := newDurable(t, pool, "cache") // at 0: behind the window

	d.follow(t, srv.addr)
	require.Eventually(t, func() bool { return d.resyncs.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	d.waitApplied(t, 10)
	for i := range 5 {
		insertItem(t, pool, fmt.Sprint("new", i))
	}
	head := waitHead(t, s, pool)
	d.waitApplied(t, head)
	require.Equal(t, []int64{11, 12, 13, 14, 15}, d.appliedIDs(t), "after the resync, only new events")
	require.EqualValues(t, 1, d.resyncs.Load())
}

func TestFollowValidatesOptions(t *testing.T) {
	err := stream.Follow(context.Background(), stream.FollowOptions{})
	require.Error(t, err)
}
