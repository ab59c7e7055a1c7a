package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
	"github.com/millwright/millwright/services/billing/internal/seats"
	"github.com/millwright/millwright/services/billing/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newStore(t *testing.T) *store.Store {
	t.Helper()
	return store.New(billingtest.Pool(t, billingtest.NewDB(t)), seats.DefaultWeights)
}

func mem(ws, user, email string, role seats.Role) seats.MemberChange {
	return seats.MemberChange{Workspace: ws, Username: user, Email: email, Role: role}
}

func disabled(m seats.MemberChange) seats.MemberChange { m.Disabled = true; return m }

// TestSeatCases is the table of seat rules the issue names, counted by the one SQL
// definition, with the price of turning builder on in one workspace.
func TestSeatCases(t *testing.T) {
	const (
		A = seats.RoleAdmin
		D = seats.RoleDeveloper
		O = seats.RoleOperator
	)
	tests := []struct {
		name      string
		members   []seats.MemberChange
		builders  []seats.BuilderChange
		want      seats.Usage
		enable    string // workspace to price turning builder on in
		wantDelta int64
	}{
		{
			name:    "author in one workspace, operator in another: one seat, builder in the second costs 0",
			members: []seats.MemberChange{mem("w1", "ann", "ann@x", D), mem("w2", "ann", "ann@x", O)},
			want:    seats.Usage{Authors: 1, MilliSeats: 1000}, enable: "w2", wantDelta: 0,
		},
		{
			name:     "operator-only in two workspaces, builder on in one: author",
			members:  []seats.MemberChange{mem("w1", "bob", "bob@x", O), mem("w2", "bob", "bob@x", O)},
			builders: []seats.BuilderChange{{Workspace: "w1", Builder: true}},
			want:     seats.Usage{Authors: 1, MilliSeats: 1000}, enable: "w2", wantDelta: 0,
		},
		{
			name:    "operator-only in two workspaces, no builder: half a seat; builder costs half",
			members: []seats.MemberChange{mem("w1", "bob", "bob@x", O), mem("w2", "bob", "bob@x", O)},
			want:    seats.Usage{Operators: 1, MilliSeats: 500}, enable: "w1", wantDelta: 500,
		},
		{
			name:    "disabled member counts nothing",
			members: []seats.MemberChange{disabled(mem("w1", "cat", "cat@x", D))},
			want:    seats.Usage{}, enable: "w1", wantDelta: 0,
		},
		{
			name:    "disabled author plus enabled operator elsewhere: operator",
			members: []seats.MemberChange{disabled(mem("w1", "cat", "cat@x", A)), mem("w2", "cat", "cat@x", O)},
			want:    seats.Usage{Operators: 1, MilliSeats: 500}, enable: "w1", wantDelta: 0,
		},
		{
			name:     "disabled operator in a builder workspace: nothing",
			members:  []seats.MemberChange{disabled(mem("w1", "dan", "dan@x", O))},
			builders: []seats.BuilderChange{{Workspace: "w1", Builder: true}},
			want:     seats.Usage{}, enable: "w1", wantDelta: 0,
		},
		{
			name: "same email in many workspaces counted once",
			members: []seats.MemberChange{
				mem("w1", "eve", "eve@x", D), mem("w2", "eve2", "eve@x", D), mem("w3", "e", "eve@x", A),
				mem("w4", "eve", "eve@x", O), mem("w5", "eve", "eve@x", O),
			},
			want: seats.Usage{Authors: 1, MilliSeats: 1000}, enable: "w4", wantDelta: 0,
		},
		{
			name: "workspace of operators who author elsewhere may be enabled at no cost",
			members: []seats.MemberChange{
				mem("w1", "f", "f@x", D), mem("w1", "g", "g@x", A),
				mem("w2", "f", "f@x", O), mem("w2", "g", "g@x", O),
			},
			want: seats.Usage{Authors: 2, MilliSeats: 2000}, enable: "w2", wantDelta: 0,
		},
		{
			name: "mixed workspace: only operator-only users cost the difference",
			members: []seats.MemberChange{
				mem("w1", "f", "f@x", D),
				mem("w2", "f", "f@x", O), mem("w2", "h", "h@x", O), mem("w2", "i", "i@x", O),
				mem("w3", "i", "i@x", O),
			},
			want: seats.Usage{Authors: 1, Operators: 2, MilliSeats: 2000}, enable: "w2", wantDelta: 1000,
		},
		{
			name:     "re-enabling builder is a zero delta",
			members:  []seats.MemberChange{mem("w1", "j", "j@x", O), mem("w1", "k", "k@x", O)},
			builders: []seats.BuilderChange{{Workspace: "w1", Builder: true}},
			want:     seats.Usage{Authors: 2, MilliSeats: 2000}, enable: "w1", wantDelta: 0,
		},
		{
			name:    "workspace without settings row: builder off",
			members: []seats.MemberChange{mem("nosettings", "l", "l@x", O)},
			want:    seats.Usage{Operators: 1, MilliSeats: 500}, enable: "nosettings", wantDelta: 500,
		},
	}
	s := newStore(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, s.Resync(ctx, seats.Snapshot{Position: 10, Members: tt.members, Builders: tt.builders}))
			cur, err := s.Usage(ctx)
			require.NoError(t, err)
			require.Equal(t, tt.want, cur.Usage)
			p, err := s.Price(ctx, seats.BuilderChange{Workspace: tt.enable, Builder: true}, 10)
			require.NoError(t, err)
			require.Equal(t, tt.want, p.Before, "before is the shown number")
			require.Equal(t, tt.wantDelta, p.Delta())
			after, err := s.Usage(ctx)
			require.NoError(t, err)
			require.Equal(t, tt.want, after.Usage, "pricing must not change the projection")
		})
	}
}

func TestPriceMemberChanges(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	require.NoError(t, s.Resync(ctx, seats.Snapshot{Position: 3, Members: []seats.MemberChange{
		mem("w1", "op", "op@x", seats.RoleOperator), mem("w1", "dev", "dev@x", seats.RoleDeveloper),
	}}))
	tests := []struct {
		name   string
		change seats.MemberChange
		delta  int64
	}{
		{"new developer", mem("w1", "new", "new@x", seats.RoleDeveloper), 1000},
		{"new operator", mem("w1", "new", "new@x", seats.RoleOperator), 500},
		{"operator promoted", mem("w1", "op", "op@x", seats.RoleDeveloper), 500},
		{"developer joins another workspace", mem("w2", "dev", "dev@x", seats.RoleAdmin), 0},
		{"developer disabled", disabled(mem("w1", "dev", "dev@x", seats.RoleDeveloper)), -1000},
		{"operator removed", seats.MemberChange{Workspace: "w1", Username: "op", Removed: true}, -500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := s.Price(ctx, tt.change, 0)
			require.NoError(t, err)
			require.Equal(t, int64(1500), p.Before.MilliSeats)
			require.Equal(t, tt.delta, p.Delta())
		})
	}
	_, err := s.Price(ctx, seats.BuilderChange{Workspace: "w1", Builder: true}, 4)
	require.ErrorIs(t, err, store.ErrBehind)
}

func TestApplyIsIdempotent(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	applied, err := s.Apply(ctx, 5, mem("w1", "a", "a@x", seats.RoleDeveloper))
	require.NoError(t, err)
	require.True(t, applied)
	// A replayed or older event is skipped, with its effect.
	applied, err = s.Apply(ctx, 5, mem("w1", "b", "b@x", seats.RoleDeveloper))
	require.NoError(t, err)
	require.False(t, applied)
	applied, err = s.Apply(ctx, 3, mem("w1", "c", "c@x", seats.RoleDeveloper))
	require.NoError(t, err)
	require.False(t, applied)
	applied, err = s.Apply(ctx, 9, nil) // an event billing ignores still advances the position
	require.NoError(t, err)
	require.True(t, applied)
	st, err := s.ProjectionState(ctx)
	require.NoError(t, err)
	require.Equal(t, store.State{Position: 9, AppliedEvents: 2}, st)
	cur, err := s.Usage(ctx)
	require.NoError(t, err)
	require.Equal(t, seats.Usage{Authors: 1, MilliSeats: 1000}, cur.Usage)
}

func TestReportsAndCap(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	require.NoError(t, s.Resync(ctx, seats.Snapshot{Position: 1, Members: []seats.MemberChange{
		mem("w1", "a", "a@x", seats.RoleDeveloper), mem("w1", "b", "b@x", seats.RoleOperator),
	}}))
	c, err := s.SetCap(ctx, 7)
	require.NoError(t, err)
	require.Equal(t, int64(7), c)
	var ids []int64
	for range 3 {
		r, err := s.WriteReport(ctx)
		require.NoError(t, err)
		require.Equal(t, seats.Usage{Authors: 1, Operators: 1, MilliSeats: 1500}, r.Usage)
		require.Equal(t, seats.DefaultWeights, r.Weights)
		require.Equal(t, int64(7), r.CapSeats)
		require.Equal(t, int64(1), r.Position)
		ids = append(ids, r.ID)
	}
	page, err := s.ListReports(ctx, 0, 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, ids[2], page[0].ID)
	page, err = s.ListReports(ctx, page[1].ID, 2)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, ids[0], page[0].ID)
}

// TestSeatCountersMatchRecount: the per-email counters the triggers maintain equal a recount
// from the member and builder tables after every kind of write (member added, changed,
// re-emailed, disabled, removed; builder flipped; workspace removed; resync), including the
// hypothetical writes of price checks, which must leave no trace.
func TestSeatCountersMatchRecount(t *testing.T) {
	dsn := billingtest.NewDB(t)
	p := billingtest.Pool(t, dsn)
	s := store.New(p, seats.DefaultWeights)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	roles := []seats.Role{seats.RoleAdmin, seats.RoleDeveloper, seats.RoleOperator, seats.RoleOperator}
	randomChange := func() seats.Change {
		ws := fmt.Sprintf("w%d", rng.IntN(6))
		switch r := rng.IntN(20); {
		case r < 13:
			return seats.MemberChange{Workspace: ws, Username: fmt.Sprintf("u%d", rng.IntN(30)),
				Email: fmt.Sprintf("e%d@x", rng.IntN(20)), Role: roles[rng.IntN(len(roles))], Disabled: rng.IntN(5) == 0}
		case r < 15:
			return seats.MemberChange{Workspace: ws, Username: fmt.Sprintf("u%d", rng.IntN(30)), Removed: true}
		case r < 19:
			return seats.BuilderChange{Workspace: ws, Builder: rng.IntN(2) == 0}
		default:
			return seats.WorkspaceRemoved{Workspace: ws}
		}
	}
	type counts struct {
		Email                    string
		Memberships, Authorships int
	}
	read := func(q string) []counts {
		rows, err := p.Query(ctx, q)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[counts])
		require.NoError(t, err)
		return out
	}
	const maintained = `SELECT email, memberships, authorships FROM seat_person ORDER BY email`
	const recount = `SELECT m.email, count(*)::int, count(*) FILTER (WHERE membership_authors(m.role, w.builder))::int
		FROM member m LEFT JOIN workspace_builder w ON w.workspace = m.workspace
		WHERE NOT m.disabled GROUP BY m.email ORDER BY m.email`
	id := int64(0)
	for round := range 30 {
		for range 20 {
			id++
			_, err := s.Apply(ctx, id, randomChange())
			require.NoError(t, err)
		}
		if c, ok := randomChange().(seats.WorkspaceRemoved); !ok {
			_, err := s.Price(ctx, c, 0)
			require.NoError(t, err)
		}
		if round%10 == 9 {
			var snap seats.Snapshot
			snap.Position = id
			for range 40 {
				switch c := randomChange().(type) {
				case seats.MemberChange:
					if !c.Removed {
						snap.Members = append(snap.Members, c)
					}
				case seats.BuilderChange:
					snap.Builders = append(snap.Builders, c)
				}
			}
			require.NoError(t, s.Resync(ctx, snap))
		}
		require.Equal(t, read(recount), read(maintained), "round %d", round)
	}
}

func TestCustomWeights(t *testing.T) {
	w := seats.Weights{AuthorMilli: 2000, OperatorMilli: 250}
	s := store.New(billingtest.Pool(t, billingtest.NewDB(t)), w)
	ctx := context.Background()
	require.NoError(t, s.Resync(ctx, seats.Snapshot{Position: 1, Members: []seats.MemberChange{
		mem("w1", "a", "a@x", seats.RoleAdmin), mem("w1", "b", "b@x", seats.RoleOperator), mem("w1", "c", "c@x", seats.RoleOperator),
	}}))
	cur, err := s.Usage(ctx)
	require.NoError(t, err)
	require.Equal(t, seats.Usage{Authors: 1, Operators: 2, MilliSeats: 2500}, cur.Usage)
	r, err := s.WriteReport(ctx)
	require.NoError(t, err)
	require.Equal(t, cur.Usage, r.Usage)
	require.Equal(t, w, r.Weights, "a report records the weights it was counted with")
	p, err := s.Price(ctx, seats.BuilderChange{Workspace: "w1", Builder: true}, 1)
	require.NoError(t, err)
	require.Equal(t, int64(2*(2000-250)), p.Delta())
}
