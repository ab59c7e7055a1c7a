package projection_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
	"github.com/millwright/millwright/services/billing/internal/projection"
	"github.com/millwright/millwright/services/billing/internal/seats"
	"github.com/millwright/millwright/services/billing/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// TestMainWrapper keeps pgtest's cleanup: goleak's VerifyTestMain calls os.Exit itself, so
// pgtest.Main cannot wrap it; the cluster's watchdog removes the server when the binary ends.
var _ = pgtest.Main

// slowStore delays every Apply so that a test can kill things mid-stream.
type slowStore struct {
	*store.Store
	delay time.Duration
}

func (s slowStore) Apply(ctx context.Context, id int64, c seats.Change) (bool, error) {
	time.Sleep(s.delay)
	return s.Store.Apply(ctx, id, c)
}

type member struct {
	ws, user, email, role string
	disabled              bool
}

func upstreamMembers(t *testing.T, u *billingtest.Upstream) []member {
	return members(t, u.Pool, `SELECT workspace_id, username, email, role, disabled FROM member`)
}

func billingMembers(t *testing.T, dsn string) []member {
	return members(t, billingtest.Pool(t, dsn), `SELECT workspace, username, email, role, disabled FROM member`)
}

// members reads q's (workspace, username, email, role, disabled) rows in workspace/user order:
// upstream's and billing's member tables compare equal when the projection is caught up.
func members(t *testing.T, p *pgxpool.Pool, q string) []member {
	rows, err := p.Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	var out []member
	for rows.Next() {
		var m member
		require.NoError(t, rows.Scan(&m.ws, &m.user, &m.email, &m.role, &m.disabled))
		out = append(out, m)
	}
	require.NoError(t, rows.Err())
	sort.Slice(out, func(i, j int) bool { return out[i].ws+"/"+out[i].user < out[j].ws+"/"+out[j].user })
	return out
}

// writeEvents makes n upstream changes of every shape billing follows, plus noise.
func writeEvents(t *testing.T, u *billingtest.Upstream, rng *rand.Rand, n int, tag string) {
	ctx := context.Background()
	roles := []string{"admin", "developer", "operator", "operator"}
	for i := range n {
		ws := fmt.Sprintf("w%d", rng.IntN(5))
		user := fmt.Sprintf("u%d", rng.IntN(40))
		var err error
		switch r := rng.IntN(10); {
		case r < 6:
			err = u.UpsertMember(ctx, ws, user, user+"@example.com", roles[rng.IntN(len(roles))], rng.IntN(5) == 0)
		case r < 7:
			err = u.RemoveMember(ctx, ws, user)
		case r < 9:
			err = u.SetBuilder(ctx, ws, rng.IntN(2) == 0)
		default:
			err = u.Noise(ctx, fmt.Sprintf("%s-%d", tag, i))
		}
		require.NoError(t, err)
	}
}

func waitPosition(t *testing.T, s *store.Store, pos int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		p, err := s.Position(context.Background())
		return err == nil && p >= pos
	}, 30*time.Second, 10*time.Millisecond)
}

func run(c *projection.Consumer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			panic(err)
		}
	}
}

var fast = projection.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	Logger: slog.New(slog.DiscardHandler)}

// TestSurvivesRestartAndKilledStream applies events while the upstream is killed mid-stream
// and billing itself is restarted (a new store and consumer on the same database), then runs
// two replicas at once; every event must be applied exactly once: applied_events == head
// (ids are contiguous here: nothing rolls back upstream), position == head, and the
// projection equals policy's tables.
func TestSurvivesRestartAndKilledStream(t *testing.T) {
	u := billingtest.NewUpstream(t)
	rng := rand.New(rand.NewPCG(1, 2))
	writeEvents(t, u, rng, 300, "a")
	head, err := u.Head(context.Background())
	require.NoError(t, err)

	dsn := billingtest.NewDB(t)
	s1 := store.New(billingtest.Pool(t, dsn), seats.DefaultWeights)
	c1 := projection.New(projection.NewGRPCSource(u.Conn(t)), slowStore{s1, 2 * time.Millisecond}, fast)
	stop1 := run(c1)

	waitPosition(t, s1, head/3)
	u.Stop() // the stream dies mid-flight
	writeEvents(t, u, rng, 100, "b")
	stop1() // billing restarts too, possibly in the middle of an Apply
	p, err := s1.Position(context.Background())
	require.NoError(t, err)
	require.Less(t, p, head, "the kill should land mid-stream")

	u.Start()
	s2 := store.New(billingtest.Pool(t, dsn), seats.DefaultWeights)
	c2 := projection.New(projection.NewGRPCSource(u.Conn(t)), slowStore{s2, time.Millisecond}, fast)
	c3 := projection.New(projection.NewGRPCSource(u.Conn(t)), s2, fast) // a second replica
	stop2, stop3 := run(c2), run(c3)
	defer stop2()
	defer stop3()

	// Kill once more while both replicas are consuming.
	time.Sleep(50 * time.Millisecond)
	u.Stop()
	writeEvents(t, u, rng, 50, "c")
	u.Start()

	head, err = u.Head(context.Background())
	require.NoError(t, err)
	waitPosition(t, s2, head)
	st, err := s2.ProjectionState(context.Background())
	require.NoError(t, err)
	require.Equal(t, store.State{Position: head, AppliedEvents: head}, st, "every event applied exactly once")
	require.Equal(t, upstreamMembers(t, u), billingMembers(t, dsn))
}

// TestResyncFromSnapshot: a consumer whose position was pruned upstream rebuilds from the
// snapshot and resumes after it.
func TestResyncFromSnapshot(t *testing.T) {
	u := billingtest.NewUpstream(t)
	rng := rand.New(rand.NewPCG(3, 4))
	writeEvents(t, u, rng, 120, "a")
	require.NoError(t, u.Prune(context.Background()))
	writeEvents(t, u, rng, 30, "b")

	dsn := billingtest.NewDB(t)
	s := store.New(billingtest.Pool(t, dsn), seats.DefaultWeights)
	c := projection.New(projection.NewGRPCSource(u.Conn(t)), s, fast)
	stop := run(c)
	defer stop()
	head, err := u.Head(context.Background())
	require.NoError(t, err)
	waitPosition(t, s, head)
	st, err := s.ProjectionState(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Resyncs)
	require.Equal(t, upstreamMembers(t, u), billingMembers(t, dsn))

	// Events after the resync are followed as usual.
	require.NoError(t, u.UpsertMember(context.Background(), "w1", "late", "late@x", "developer", false))
	head, err = u.Head(context.Background())
	require.NoError(t, err)
	waitPosition(t, s, head)
	require.Equal(t, upstreamMembers(t, u), billingMembers(t, dsn))
}

// TestWaitFor: a check asking for a position the projection has not applied waits, and fails
// with ErrBehind after its bound.
func TestWaitFor(t *testing.T) {
	u := billingtest.NewUpstream(t)
	ctx := context.Background()
	require.NoError(t, u.UpsertMember(ctx, "w1", "a", "a@x", "operator", false))
	head, err := u.Head(ctx)
	require.NoError(t, err)

	s := store.New(billingtest.Pool(t, billingtest.NewDB(t)), seats.DefaultWeights)
	c := projection.New(projection.NewGRPCSource(u.Conn(t)), s, fast)
	require.NoError(t, c.WaitFor(ctx, 0, time.Millisecond), "position 0 never waits")
	start := time.Now()
	err = c.WaitFor(ctx, head, 150*time.Millisecond)
	require.ErrorIs(t, err, projection.ErrBehind)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)

	stop := run(c)
	defer stop()
	require.NoError(t, c.WaitFor(ctx, head, 10*time.Second))
	h, applied := c.Lag()
	require.GreaterOrEqual(t, applied, head)
	_ = h
}
