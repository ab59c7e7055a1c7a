package store_test

import (
	"context"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/internal/testdb"
	"github.com/millwright/millwright/services/policy/migrations"
)

// migrationsThrough is the embedded migrations up to version v: a database as the previous
// release left it.
func migrationsThrough(t testing.TB, v int64) fs.FS {
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	out := fstest.MapFS{}
	for _, f := range files {
		n, err := strconv.ParseInt(f[:strings.IndexByte(f, '_')], 10, 64)
		require.NoError(t, err)
		if n <= v {
			b, err := fs.ReadFile(migrations.FS, f)
			require.NoError(t, err)
			out[f] = &fstest.MapFile{Data: b}
		}
	}
	return out
}

// The partitioning migration (00007) on a database at version 6 with rows in it: every run
// and token is kept and behaves as before (live ones authenticate, finished and revoked ones
// are refused, a job id stays taken), and the old rows leave with their legacy partitions.
func TestUpgradeToPartitionedKeepsRunsAndTokens(t *testing.T) {
	ctx := context.Background()
	v6 := migrationsThrough(t, 6)
	dsn := pgtest.NewDatabase(t, "policy_v6", func(ctx context.Context, dsn string) error {
		_, err := migrate.Up(ctx, dsn, v6)
		return err
	})
	pool := pgtest.Pool(t, dsn)
	s := store.New(pool)
	newWorkspace(t, s, "w", "W")

	// Rows as version 6 wrote them: a user token, a revoked one, a live run (recorded with the
	// user token: viewer admin@x), a child of it, and a run finished 30 days ago.
	_, userDigest := rulebook.NewSecret(rulebook.PrefixUser)
	require.NoError(t, s.CreateUserToken(ctx, store.UserToken{ID: "tok_user", Digest: userDigest, Workspace: "w",
		Username: "admin", ExpiresAt: time.Now().Add(300 * 24 * time.Hour)}))
	_, err := s.UpsertMember(ctx, store.Member{Workspace: "w", Username: "dev", Email: "dev@x", Role: rulebook.RoleDeveloper}, nil)
	require.NoError(t, err)
	_, devDigest := rulebook.NewSecret(rulebook.PrefixUser)
	require.NoError(t, s.CreateUserToken(ctx, store.UserToken{ID: "tok_dev", Digest: devDigest, Workspace: "w",
		Username: "dev", ExpiresAt: time.Now().Add(300 * 24 * time.Hour)}))
	_, revokedDigest := rulebook.NewSecret(rulebook.PrefixUser)
	require.NoError(t, s.CreateUserToken(ctx, store.UserToken{ID: "tok_revoked", Digest: revokedDigest, Workspace: "w",
		Username: "admin", ExpiresAt: time.Now().Add(300 * 24 * time.Hour)}))
	require.NoError(t, s.RevokeToken(ctx, "w", "tok_revoked", ""))
	liveJob := newJobID()
	_, liveDigest := rulebook.NewSecret(rulebook.PrefixJob)
	_, err = s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: liveJob, Origin: rulebook.OriginDirect, PermissionedAs: "u/admin",
		CredentialDigest: userDigest, TokenID: "tok_live_job", TokenDigest: liveDigest, ExpiresAt: time.Now().Add(7 * 24 * time.Hour)})
	require.NoError(t, err)
	childJob := newJobID()
	_, childDigest := rulebook.NewSecret(rulebook.PrefixJob)
	_, err = s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: childJob, Origin: rulebook.OriginJobToken,
		CredentialDigest: liveDigest, TokenID: "tok_child_job", TokenDigest: childDigest, ExpiresAt: time.Now().Add(7 * 24 * time.Hour)})
	require.NoError(t, err)
	oldJob, oldDigest := oldRun(t, pool, "w", time.Now().Add(-30*24*time.Hour))
	before := count(t, pool, `SELECT count(*) FROM stream_outbox`)

	v, err := migrate.Up(ctx, dsn, migrations.FS)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, int64(7))
	require.Equal(t, before, count(t, pool, `SELECT count(*) FROM stream_outbox`), "moving rows is no event")
	require.Equal(t, []string{"token_job", "token_user"}, partitionNames(t, pool, "token"))
	require.Contains(t, partitionNames(t, pool, "run"), "run_legacy")
	require.Contains(t, partitionNames(t, pool, "token_job"), "token_job_legacy")
	require.Equal(t, 3, count(t, pool, `SELECT count(*) FROM run`))
	require.Equal(t, 6, count(t, pool, `SELECT count(*) FROM token`))

	// Same answers as before the upgrade.
	id, err := s.Authenticate(ctx, userDigest)
	require.NoError(t, err)
	require.Equal(t, "admin", id.Username)
	_, err = s.Authenticate(ctx, revokedDigest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
	_, err = s.Authenticate(ctx, oldDigest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
	run, err := s.RunByToken(ctx, childDigest)
	require.NoError(t, err)
	require.Equal(t, liveJob, run.ParentJobID)
	require.Equal(t, "admin@x", *run.Viewer)
	_, err = s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: liveJob, Origin: rulebook.OriginSchedule, PermissionedAs: "u/admin",
		TokenID: rulebook.NewTokenID(), TokenDigest: rulebook.Digest("again"), ExpiresAt: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, rulebook.ErrAlreadyExists, "a legacy run's job id stays taken")
	// The rows still change through the new tables' triggers (events and the identity guard).
	require.NoError(t, s.FinishRun(ctx, "w", liveJob))
	_, err = s.Authenticate(ctx, liveDigest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM stream_outbox WHERE kind = 'run' AND op = 'update' AND key = $1`, liveJob))
	// Finishing the run is the job token's revocation (migration 00008): its run event, no token event.
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM stream_outbox WHERE kind = 'token' AND key = 'tok_live_job'`))
	_, err = pool.Exec(ctx, `UPDATE run SET viewer_email = 'x@x' WHERE job_id = $1`, childJob)
	require.ErrorContains(t, err, "recorded identity cannot change")
	_, err = s.Authenticate(ctx, devDigest)
	require.NoError(t, err)
	require.NoError(t, s.RemoveMember(ctx, "w", "dev"))
	_, err = s.Authenticate(ctx, devDigest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential)

	// New runs are recorded (today's still fall into the legacy partition, which ends tomorrow);
	// the legacy partitions leave like any day once past the retention.
	newJob, _ := liveRun(t, s, "w")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM run WHERE job_id = $1`, newJob))
	res, err := s.Maintain(ctx, time.Now().Add(16*day), retention)
	require.NoError(t, err)
	require.Contains(t, res.Dropped, "run_legacy")
	require.Contains(t, res.Dropped, "token_job_legacy")
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM run WHERE job_id IN ($1, $2, $3)`, liveJob, childJob, oldJob))
	_, err = s.RunByToken(ctx, childDigest)
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
}

// testdb's fresh databases run the same migration with no rows: no legacy partitions.
func TestFreshDatabaseHasNoLegacyPartitions(t *testing.T) {
	pool := testdb.Pool(t)
	require.NotContains(t, partitionNames(t, pool, "run"), "run_legacy")
	// Today to the next Monday, then the week after: 2 partitions each, covering 8 days at least.
	for _, parent := range []string{"run", "token_job"} {
		require.Len(t, partitionNames(t, pool, parent), 2)
		for i := range 8 {
			require.NotEmpty(t, partitionAt(t, pool, parent, time.Now().Add(time.Duration(i)*day)))
		}
	}
}

// 00007's Down keeps every row in plain tables again, and its Up then runs on that database.
func TestPartitioningMigrationDownAndUpAgain(t *testing.T) {
	ctx := context.Background()
	s, pool := storeWithW(t)
	_, digest := liveRun(t, s, "w")
	liveRun(t, s, "w")
	b, err := fs.ReadFile(migrations.FS, "00007_run_token_partitions.sql")
	require.NoError(t, err)
	up, down, ok := strings.Cut(string(b), "-- +goose Down")
	require.True(t, ok)
	_, err = pool.Exec(ctx, down)
	require.NoError(t, err)
	require.Equal(t, 2, count(t, pool, `SELECT count(*) FROM run`))
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM pg_partitioned_table WHERE partrelid <> 'stream_outbox'::regclass`), "run and token are plain tables again")
	_, err = s.Authenticate(ctx, digest)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, up)
	require.NoError(t, err)
	require.Equal(t, 2, count(t, pool, `SELECT count(*) FROM run`))
	require.Contains(t, partitionNames(t, pool, "run"), "run_legacy")
	_, err = s.Authenticate(ctx, digest)
	require.NoError(t, err)
}
