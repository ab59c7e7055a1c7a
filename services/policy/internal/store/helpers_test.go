package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// newWorkspace creates workspace ws, named name, whose first admin is "admin".
func newWorkspace(t testing.TB, s *store.Store, ws, name string) {
	t.Helper()
	require.NoError(t, s.CreateWorkspace(context.Background(), ws, name, store.Member{Username: "admin", Email: "admin@x"}, nil))
}

// storeWithW is where most tests start: a store over a new database holding workspace "w"
// (see newWorkspace), and its pool.
func storeWithW(t testing.TB) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.Pool(t)
	s := store.New(pool)
	newWorkspace(t, s, "w", "W")
	return s, pool
}

// addMembers upserts members into workspace "w", each with the email <username>@x.
func addMembers(t testing.TB, s *store.Store, members ...store.Member) {
	t.Helper()
	for _, m := range members {
		m.Workspace, m.Email = "w", m.Username+"@x"
		_, err := s.UpsertMember(context.Background(), m, nil)
		require.NoError(t, err)
	}
}

// requireTokenRefused checks that the job token with this digest neither authenticates nor
// names a run.
func requireTokenRefused(t testing.TB, s *store.Store, digest []byte) {
	t.Helper()
	_, err := s.Authenticate(context.Background(), digest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
	_, err = s.RunByToken(context.Background(), digest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
}
