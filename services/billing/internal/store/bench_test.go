package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/billing/internal/billingtest"
	"github.com/millwright/millwright/services/billing/internal/seats"
	"github.com/millwright/millwright/services/billing/internal/store"
)

// The benchmark fixture: 100,000 users (emails) over 1,000 workspaces, each user a member of
// 1 to 3 workspaces (about 200,000 memberships); 30% of memberships author (admin or
// developer), the rest are operators; 5% are disabled; 10% of workspaces have builder on.
const (
	benchUsers      = 100_000
	benchWorkspaces = 1_000
)

var (
	benchOnce  sync.Once
	benchDSN   string
	benchErr   error
	benchRows  int
	benchSetup = func(b *testing.B) {
		benchOnce.Do(func() {
			benchDSN = billingtest.NewDB(b)
			s := store.New(pool(b, benchDSN), seats.DefaultWeights)
			snap := benchSnapshot()
			benchRows = len(snap.Members)
			benchErr = s.Resync(context.Background(), snap)
			if benchErr == nil {
				// As autovacuum would soon after a resync: visibility map set, statistics fresh.
				_, benchErr = pool(b, benchDSN).Exec(context.Background(), `VACUUM ANALYZE member`)
			}
		})
		require.NoError(b, benchErr)
	}
)

// pool opens a pool that outlives the benchmark that created it (the fixture is shared).
func pool(b testing.TB, dsn string) *pgxpool.Pool {
	p, err := pgxpool.New(context.Background(), dsn)
	require.NoError(b, err)
	return p
}

func benchSnapshot() seats.Snapshot {
	rng := rand.New(rand.NewPCG(42, 42))
	snap := seats.Snapshot{Position: 1}
	for u := range benchUsers {
		n := 1 + rng.IntN(3)
		seen := map[int]bool{}
		for range n {
			w := rng.IntN(benchWorkspaces)
			if seen[w] {
				continue
			}
			seen[w] = true
			role := seats.RoleOperator
			if rng.IntN(10) < 3 {
				role = seats.RoleDeveloper
			}
			snap.Members = append(snap.Members, seats.MemberChange{
				Workspace: fmt.Sprintf("ws%04d", w), Username: fmt.Sprintf("user%06d", u),
				Email: fmt.Sprintf("user%06d@example.com", u), Role: role, Disabled: rng.IntN(20) == 0,
			})
		}
	}
	for w := range benchWorkspaces {
		snap.Builders = append(snap.Builders, seats.BuilderChange{Workspace: fmt.Sprintf("ws%04d", w), Builder: w%10 == 0})
	}
	return snap
}

// BenchmarkSeats measures the seat query at 100k users / 1k workspaces against a baseline
// measured in the same run: a plain count(*) over the member table.
func BenchmarkSeats(b *testing.B) {
	benchSetup(b)
	ctx := context.Background()
	p := pool(b, benchDSN)
	defer p.Close()
	s := store.New(p, seats.DefaultWeights)
	b.Run("baseline_count_members", func(b *testing.B) {
		for b.Loop() {
			var n int
			require.NoError(b, p.QueryRow(ctx, `SELECT count(*) FROM member`).Scan(&n))
			require.Equal(b, benchRows, n)
		}
	})
	// The design seat_person replaced: aggregate every membership per call. Kept as a second
	// reference point, measured in the same run.
	b.Run("rejected_group_by_email", func(b *testing.B) {
		for b.Loop() {
			var a, o int64
			require.NoError(b, p.QueryRow(ctx, `
				SELECT count(*) FILTER (WHERE author), count(*) FILTER (WHERE NOT author)
				FROM (SELECT m.email, bool_or(membership_authors(m.role, w.builder)) AS author
				      FROM member m LEFT JOIN workspace_builder w ON w.workspace = m.workspace
				      WHERE NOT m.disabled GROUP BY m.email) c`).Scan(&a, &o))
		}
	})
	b.Run("GetSeatUsage", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Usage(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CheckSeatCapForOperatorBuilder", func(b *testing.B) {
		i := 0
		for b.Loop() {
			ws := fmt.Sprintf("ws%04d", 1+i%(benchWorkspaces-1)) // mostly builder-off workspaces
			i++
			p, err := s.Price(ctx, seats.BuilderChange{Workspace: ws, Builder: true}, 1)
			if err != nil {
				b.Fatal(err)
			}
			if p.Delta() < 0 {
				b.Fatal("negative delta")
			}
		}
	})
}
