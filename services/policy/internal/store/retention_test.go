package store_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

const day = 24 * time.Hour

// Daily partitions in these tests, so that each case lands in a partition of its own; the
// service's are weekly (internal/retention).
var retention = store.Retention{Runs: 14 * day, Tokens: 14 * day, PartitionDays: 1, Ahead: 7 * day}

func newJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// oldRun writes a run and its job token as RecordRun and FinishRun would have at `at`: the
// database's now() cannot be moved, so the rows carry the times themselves.
func oldRun(t *testing.T, pool *pgxpool.Pool, ws string, at time.Time) (jobID string, digest []byte) {
	t.Helper()
	jobID = newJobID()
	_, digest = rulebook.NewSecret(rulebook.PrefixJob)
	tokenID := rulebook.NewTokenID()
	_, err := pool.Exec(context.Background(), `
		WITH r AS (INSERT INTO run (job_id, workspace_id, permissioned_as, origin, token_id, created_at, finished_at)
		           VALUES ($1, $2, 'u/admin', 'schedule', $3, $4::timestamptz, $4::timestamptz + interval '1 minute'))
		INSERT INTO token (id, digest, kind, workspace_id, job_id, created_at, expires_at, revoked_at)
		VALUES ($3, $5, 'job', $2, $1, $4::timestamptz, $4::timestamptz + interval '7 days', $4::timestamptz + interval '1 minute')`,
		jobID, ws, tokenID, at, digest)
	require.NoError(t, err)
	return jobID, digest
}

// liveRun records a run now through RecordRun and returns its job id and token digest.
func liveRun(t *testing.T, s *store.Store, ws string) (jobID string, digest []byte) {
	t.Helper()
	jobID = newJobID()
	_, digest = rulebook.NewSecret(rulebook.PrefixJob)
	_, err := s.RecordRun(context.Background(), store.NewRun{Workspace: ws, JobID: jobID, PermissionedAs: "u/admin",
		Origin: rulebook.OriginSchedule, TokenID: rulebook.NewTokenID(), TokenDigest: digest, ExpiresAt: time.Now().Add(7 * day)})
	require.NoError(t, err)
	return jobID, digest
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// partitionNames lists the partitions attached under parent (pg_inherits).
func partitionNames(t *testing.T, pool *pgxpool.Pool, parent string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY 1`, parent)
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	return names
}

func relationExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	return count(t, pool, `SELECT count(*) FROM pg_class WHERE relname = $1`, name) == 1
}

// partitionAt names the partition of parent whose range holds at ("" for none).
func partitionAt(t *testing.T, pool *pgxpool.Pool, parent string, at time.Time) string {
	t.Helper()
	var name string
	err := pool.QueryRow(context.Background(), `
		SELECT coalesce(max(c.relname), '') FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) AS b
		WHERE i.inhparent = $1::regclass
		  AND coalesce((regexp_match(b, 'FROM \(''([^'']*)''\)'))[1]::timestamptz <= $2, true)
		  AND (regexp_match(b, 'TO \(''([^'']*)''\)'))[1]::timestamptz > $2`, parent, at).Scan(&name)
	require.NoError(t, err)
	return name
}

func TestRetentionDropsOnlyExpiredPartitions(t *testing.T) {
	ctx := context.Background()
	s, pool := storeWithW(t)
	now := time.Now()

	// A replica 20 days ago created the partitions of its week; a run then and one 13 days ago
	// (finished, tokens revoked).
	old := now.Add(-20 * day)
	recent := now.Add(-13 * day)
	res, err := s.Maintain(ctx, old, retention)
	require.NoError(t, err)
	oldParts := map[string]string{}
	for _, parent := range []string{"run", "token_job"} {
		oldParts[parent] = partitionAt(t, pool, parent, old)
		require.Contains(t, res.Created, oldParts[parent])
	}
	_, err = s.Maintain(ctx, recent, retention)
	require.NoError(t, err)
	oldJob, oldDigest := oldRun(t, pool, "w", old)
	recentJob, recentDigest := oldRun(t, pool, "w", recent)
	liveJob, liveDigest := liveRun(t, s, "w")

	// User tokens: revoked 20 days ago, expired 15 days ago, revoked yesterday, live.
	userTokens := map[string]string{ // id -> revoked_at, expires_at
		"tok_revoked_old":    `now() - interval '20 days', now() + interval '300 days'`,
		"tok_expired_old":    `NULL, now() - interval '15 days'`,
		"tok_revoked_recent": `now() - interval '1 day', now() + interval '300 days'`,
		"tok_live":           `NULL, now() + interval '300 days'`,
	}
	for id, times := range userTokens {
		_, digest := rulebook.NewSecret(rulebook.PrefixUser)
		_, err := pool.Exec(ctx, `INSERT INTO token (id, digest, kind, workspace_id, username, created_at, revoked_at, expires_at)
			VALUES ($1, $2, 'user', 'w', 'admin', now() - interval '30 days', `+times+`)`, id, digest)
		require.NoError(t, err)
	}

	res, err = s.Maintain(ctx, now, retention)
	require.NoError(t, err)
	require.False(t, res.Skipped)
	for parent, name := range oldParts {
		require.Contains(t, res.Dropped, name)
		require.False(t, relationExists(t, pool, name), "dropped, not only detached")
		require.Empty(t, partitionAt(t, pool, parent, old))
		require.NotEmpty(t, partitionAt(t, pool, parent, recent))
		require.NotEmpty(t, partitionAt(t, pool, parent, now.Add(7*day)), "a week ahead")
	}
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM run WHERE job_id = $1`, oldJob))
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM token WHERE digest = $1`, oldDigest))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM run WHERE job_id = $1`, recentJob))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM token WHERE digest = $1`, recentDigest))
	// No partition left whose range ended before the cutoff.
	require.Equal(t, 0, count(t, pool, `
		SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent IN ('run'::regclass, 'token_job'::regclass)
		  AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz <= $1`,
		now.Add(-retention.Tokens)))
	require.Equal(t, int64(2), res.UserTokens)
	require.Equal(t, 2, count(t, pool, `SELECT count(*) FROM token WHERE kind = 'user' AND id IN ('tok_revoked_recent', 'tok_live')`))
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM token WHERE id IN ('tok_revoked_old', 'tok_expired_old')`))
	// Deleting a user token reaches every cache (stream event); dropping partitions needs none.
	require.Equal(t, 2, count(t, pool, `SELECT count(*) FROM stream_outbox WHERE kind = 'token' AND op = 'delete'
		AND key IN ('tok_revoked_old', 'tok_expired_old')`))

	// The live run is untouched and still authenticates.
	id, err := s.Authenticate(ctx, liveDigest)
	require.NoError(t, err)
	require.Equal(t, liveJob, id.JobID)

	// Twice is the same as once.
	res, err = s.Maintain(ctx, now, retention)
	require.NoError(t, err)
	require.Empty(t, res.Created)
	require.Empty(t, res.Dropped)

	// 22 days on (past the end of the migration's first week), today's partitions go too: the run's job token is refused, everywhere a
	// job token is taken, never "unknown" and then let through.
	today := partitionAt(t, pool, "run", now)
	res, err = s.Maintain(ctx, now.Add(22*day), retention)
	require.NoError(t, err)
	require.Contains(t, res.Dropped, today)
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM run WHERE job_id = $1`, liveJob))
	requireTokenRefused(t, s, liveDigest)
	_, err = s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: newJobID(), Origin: rulebook.OriginJobToken,
		CredentialDigest: liveDigest, TokenID: rulebook.NewTokenID(), TokenDigest: rulebook.Digest("x"), ExpiresAt: now.Add(day)})
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
}

// A job token whose run is gone is refused even while the token row is still there (the two
// partitions of a day are dropped one after the other).
func TestTokenOfRemovedRunIsRefused(t *testing.T) {
	ctx := context.Background()
	s, pool := storeWithW(t)
	job, digest := liveRun(t, s, "w")
	_, err := s.Authenticate(ctx, digest)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM run WHERE job_id = $1`, job)
	require.NoError(t, err)
	requireTokenRefused(t, s, digest)
}

// A job id names one run across every retained partition, as the old primary key did.
func TestRunJobIDUniqueAcrossPartitions(t *testing.T) {
	ctx := context.Background()
	s, pool := storeWithW(t)
	_, err := s.Maintain(ctx, time.Now().Add(-3*day), retention)
	require.NoError(t, err)
	job, _ := oldRun(t, pool, "w", time.Now().Add(-3*day))
	_, err = s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: job, PermissionedAs: "u/admin", Origin: rulebook.OriginSchedule,
		TokenID: rulebook.NewTokenID(), TokenDigest: rulebook.Digest("y"), ExpiresAt: time.Now().Add(day)})
	require.ErrorIs(t, err, rulebook.ErrAlreadyExists)

	// Concurrent inserts of one new job id: exactly one wins.
	job = newJobID()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: job, PermissionedAs: "u/admin", Origin: rulebook.OriginSchedule,
				TokenID: rulebook.NewTokenID(), TokenDigest: rulebook.Digest(fmt.Sprint("z", i)), ExpiresAt: time.Now().Add(day)})
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, rulebook.ErrAlreadyExists)
		}
	}
	require.Equal(t, 1, won)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM run WHERE job_id = $1`, job))
}

// Every replica runs maintenance: two at once, while runs are recorded, end in the same state
// as one, with no error.
func TestMaintainConcurrentReplicas(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.DSN(t)
	var replicas []*store.Store
	for range 2 {
		replicas = append(replicas, store.New(pgtest.Pool(t, dsn)))
	}
	pool := replicas[0].Pool()
	require.NoError(t, replicas[0].CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, nil))
	now := time.Now()
	_, err := replicas[0].Maintain(ctx, now.Add(-20*day), retention)
	require.NoError(t, err)
	oldJob, _ := oldRun(t, pool, "w", now.Add(-20*day))

	for pass, at := range []time.Time{now, now.Add(30 * day)} {
		// During the first pass runs are recorded into today's partition meanwhile.
		stop := make(chan struct{})
		var recorder sync.WaitGroup
		var recorded int
		var recordErr error
		if pass == 0 {
			recorder.Go(func() {
				for recordErr == nil {
					select {
					case <-stop:
						return
					default:
					}
					_, recordErr = replicas[1].RecordRun(ctx, store.NewRun{Workspace: "w", JobID: newJobID(), PermissionedAs: "u/admin",
						Origin: rulebook.OriginSchedule, TokenID: rulebook.NewTokenID(), TokenDigest: rulebook.Digest(newJobID()),
						ExpiresAt: now.Add(day)})
					recorded++
				}
			})
		}
		var wg sync.WaitGroup
		results := make([]store.MaintainResult, 2*len(replicas))
		errs := make([]error, len(results))
		for i := range results {
			wg.Go(func() { results[i], errs[i] = replicas[i%len(replicas)].Maintain(ctx, at, retention) })
		}
		wg.Wait()
		close(stop)
		recorder.Wait()
		require.NoError(t, recordErr)
		if pass == 0 {
			require.Positive(t, recorded)
		}
		created := map[string]int{}
		for i, err := range errs {
			require.NoError(t, err)
			for _, n := range results[i].Created {
				created[n]++
			}
		}
		for n, c := range created {
			require.Equal(t, 1, c, "%s created once", n)
		}
		// The state is the one a single pass leaves: the week ahead of `at` exists.
		for i := range 8 {
			require.NotEmpty(t, partitionAt(t, pool, "run", at.Add(time.Duration(i)*day)))
		}
	}
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM run WHERE job_id = $1`, oldJob))
	// 30 days on, every partition up to 16 days ahead of now is gone.
	require.Empty(t, partitionAt(t, pool, "run", now))
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM run`))
}
