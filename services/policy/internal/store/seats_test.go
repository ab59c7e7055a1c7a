package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// A member write that may add seats is possible only through the priced path (UpsertMember,
// CreateWorkspace): any other write (an import, a hand-written INSERT or UPDATE) is refused by
// the database itself, while writes that cannot add seats need no check.
func TestMemberSeatsOnlyThroughTheCheckedPath(t *testing.T) {
	ctx := context.Background()
	s, pool := storeWithW(t)
	addMembers(t, s,
		store.Member{Username: "dev", Role: rulebook.RoleDeveloper},
		store.Member{Username: "op", Role: rulebook.RoleOperator},
		store.Member{Username: "off", Role: rulebook.RoleDeveloper, Disabled: true},
	)

	tests := []struct {
		name    string
		sql     string
		refused bool
	}{
		{"insert a member", `INSERT INTO member VALUES ('w', 'new', 'new@x', 'operator', false)`, true},
		{"re-enable", `UPDATE member SET disabled = false WHERE username = 'off'`, true},
		{"promote an operator", `UPDATE member SET role = 'developer' WHERE username = 'op'`, true},
		{"another email", `UPDATE member SET email = 'other@x' WHERE username = 'dev'`, true},
		{"rename (a new member)", `UPDATE member SET username = 'dev2' WHERE username = 'dev'`, true},
		{"upsert that promotes", `INSERT INTO member VALUES ('w', 'op', 'op@x', 'admin', false)
			ON CONFLICT (workspace_id, username) DO UPDATE SET role = excluded.role`, true},
		{"marked for another member", `SELECT set_config('millwright.member_seat_checked', 'w/op', true);
			INSERT INTO member VALUES ('w', 'new', 'new@x', 'developer', false)`, true},
		{"marked", `SELECT set_config('millwright.member_seat_checked', 'w/new', true);
			INSERT INTO member VALUES ('w', 'new', 'new@x', 'developer', false)`, false},
		{"insert disabled", `INSERT INTO member VALUES ('w', 'new', 'new@x', 'developer', true)`, false},
		{"disable", `UPDATE member SET disabled = true WHERE username = 'dev'`, false},
		{"demote", `UPDATE member SET role = 'operator' WHERE username = 'dev'`, false},
		{"admin to developer", `UPDATE member SET role = 'developer' WHERE username = 'admin'`, false},
		{"upsert that demotes (ON CONFLICT fires no insert check)", `INSERT INTO member VALUES ('w', 'dev', 'dev@x', 'operator', false)
			ON CONFLICT (workspace_id, username) DO UPDATE SET role = excluded.role`, false},
		{"promote a disabled member", `UPDATE member SET role = 'admin' WHERE username = 'off'`, false},
		{"delete", `DELETE FROM member WHERE username = 'dev'`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, tt.sql)
			if tt.refused {
				require.ErrorContains(t, err, "without the seat check")
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// UpsertMember and CreateWorkspace call the check only for writes that may add seats, at the
// stream head, and a refusal writes nothing.
func TestMemberWritesArePricedAtTheHead(t *testing.T) {
	pool := testdb.Pool(t)
	s := store.New(pool)
	ctx := context.Background()
	var priced []int64
	var refuse error
	check := func(_ context.Context, head int64) error { priced = append(priced, head); return refuse }
	head := func() int64 {
		h, err := s.Head(ctx)
		require.NoError(t, err)
		return h
	}

	require.NoError(t, s.CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, check))
	require.Equal(t, []int64{0}, priced, "the first admin is priced, at the empty stream's head")
	require.ErrorIs(t, s.CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, check), rulebook.ErrAlreadyExists)
	require.Len(t, priced, 1)

	op := store.Member{Workspace: "w", Username: "op", Email: "op@x", Role: rulebook.RoleOperator}
	h1 := head()
	_, err := s.UpsertMember(ctx, op, check)
	require.NoError(t, err)
	require.Equal(t, []int64{0, h1}, priced)
	_, err = s.UpsertMember(ctx, op, check)
	require.NoError(t, err)
	require.Len(t, priced, 2, "re-saving the same member is not priced")

	refuse = errors.New("over the cap")
	h2 := head()
	promoted := op
	promoted.Role = rulebook.RoleDeveloper
	_, err = s.UpsertMember(ctx, promoted, check)
	require.ErrorIs(t, err, refuse)
	require.Equal(t, []int64{0, h1, h2}, priced, "priced at the head")
	require.Equal(t, h2, head(), "the refused write appended no event")
	tn, err := s.ResolveTenancy(ctx, "w", store.ByUsername, "op")
	require.NoError(t, err)
	require.Equal(t, rulebook.RoleOperator, tn.Role, "the refused promotion was not written")
	require.ErrorIs(t, s.CreateWorkspace(ctx, "v", "V", store.Member{Username: "boss", Email: "boss@x"}, check), refuse)
	_, err = s.OperatorSettings(ctx, "v")
	var nf *rulebook.NotFoundError
	require.ErrorAs(t, err, &nf, "the refused workspace was not created")
}
