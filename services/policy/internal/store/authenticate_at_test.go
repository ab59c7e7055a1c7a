package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// TestAuthenticateAtRefusesBeforeReadingTheHead: reading the stream head waits for the
// commits in flight (stream_safe_head takes the stream lock exclusively), so a made-up token
// is refused without reading it: an unauthenticated caller flooding roleset or billing with
// bogus tokens (each an Authenticate in policy) cannot make policy's writers wait. A commit in
// flight is held here by a transaction holding the writers' shared lock.
func TestAuthenticateAtRefusesBeforeReadingTheHead(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t)
	s := store.New(pool)
	committing, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer committing.Rollback(ctx)
	_, err = committing.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(7294013770136241409)`)
	require.NoError(t, err)

	_, digest := rulebook.NewSecret(rulebook.PrefixUser)
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, _, err = s.AuthenticateAt(tctx, digest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential, "refused at once, not after waiting for the stream lock")
}
