package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// TestVersionChangesAreEvents: adding or removing a script version while the catalog row stays
// the same (same latest hash, owner, perms) is still a catalog event, so a consumer caching
// pins hears that a version stopped being one.
func TestVersionChangesAreEvents(t *testing.T) {
	s, pool := minimal(t)
	ctx := context.Background()
	events := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM stream_outbox WHERE kind = 'catalog' AND key = 'u/owner/s'`).Scan(&n))
		return n
	}
	script := store.Runnable{Workspace: "w", Kind: rulebook.KindScript, Path: "u/owner/s", LatestHash: "00000000000000a1",
		Versions: []string{"00000000000000a0", "00000000000000a1"}}
	require.NoError(t, s.RegisterRunnable(ctx, script))
	before := events()
	require.Equal(t, 3, before, "the item and its two versions")
	require.NoError(t, s.RegisterRunnable(ctx, script))
	require.Equal(t, before, events(), "re-registering the same script changes nothing")

	script.Versions = []string{"00000000000000a1"}
	require.NoError(t, s.RegisterRunnable(ctx, script))
	require.Equal(t, before+1, events(), "a version removed is an event")

	script.Versions = []string{"00000000000000a1", "00000000000000a2"}
	require.NoError(t, s.RegisterRunnable(ctx, script))
	require.Equal(t, before+2, events(), "a version added is an event")
}

// TestOnBehalfOfMustExist: whoever a runnable runs as is a member or group of the workspace,
// like every principal of its extra perms; nothing is written otherwise.
func TestOnBehalfOfMustExist(t *testing.T) {
	s, _ := minimal(t)
	ctx := context.Background()
	err := s.RegisterRunnable(ctx, store.Runnable{Workspace: "w", Kind: rulebook.KindFlow, Path: "u/owner/ghostly", OnBehalfOf: "u/ghost"})
	require.ErrorIs(t, err, rulebook.ErrNotFound)
	require.NoError(t, s.RegisterRunnable(ctx, store.Runnable{Workspace: "w", Kind: rulebook.KindFlow, Path: "u/owner/ok", OnBehalfOf: "u/owner"}))
	require.NoError(t, s.RegisterRunnable(ctx, store.Runnable{Workspace: "w", Kind: rulebook.KindFlow, Path: "u/owner/ok2", OnBehalfOf: "g/analysts"}))
}

// minimal is storeWithW with a developer "owner" and a group "analysts".
func minimal(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	s, pool := storeWithW(t)
	addMembers(t, s, store.Member{Username: "owner", Role: rulebook.RoleDeveloper})
	_, err := s.UpsertGroup(context.Background(), "w", "analysts", []string{"owner"})
	require.NoError(t, err)
	return s, pool
}
