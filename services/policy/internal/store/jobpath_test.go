package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// Concurrent RecordRun and FinishRun calls go out in shared statements (group commit): each
// call still gets its own answer (a bad one fails alone), a recorded run's token authenticates
// as soon as RecordRun returns, and a finished run's token is refused as soon as FinishRun
// returns.
func TestConcurrentRecordAndFinishEachGetTheirOwnAnswer(t *testing.T) {
	ctx := context.Background()
	s := store.New(testdb.Pool(t))
	require.NoError(t, s.CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, nil))
	require.NoError(t, s.CreateWorkspace(ctx, "other", "O", store.Member{Username: "admin", Email: "admin@x"}, nil))
	userToken := func(ws string) []byte {
		_, d := rulebook.NewSecret(rulebook.PrefixUser)
		require.NoError(t, s.CreateUserToken(ctx, store.UserToken{ID: rulebook.NewTokenID(), Digest: d, Workspace: ws,
			Username: "admin", ExpiresAt: time.Now().Add(time.Hour)}))
		return d
	}
	alice, otherWS, revoked := userToken("w"), userToken("other"), userToken("w")
	id, err := s.Authenticate(ctx, revoked)
	require.NoError(t, err)
	require.NoError(t, s.RevokeToken(ctx, "w", id.ID, ""))
	dup, _ := liveRun(t, s, "w")
	parent, parentDigest := liveRun(t, s, "w")

	type tc struct {
		n    store.NewRun
		want error
	}
	var cases []tc
	add := func(n store.NewRun, want error) {
		if n.JobID == "" {
			n.JobID = newJobID()
		}
		if n.PermissionedAs == "" && n.Origin != rulebook.OriginJobToken {
			n.PermissionedAs = "u/admin"
		}
		_, d := rulebook.NewSecret(rulebook.PrefixJob)
		n.TokenID, n.TokenDigest, n.ExpiresAt = rulebook.NewTokenID(), d, time.Now().Add(time.Hour)
		if n.Workspace == "" {
			n.Workspace = "w"
		}
		cases = append(cases, tc{n, want})
	}
	for range 8 {
		add(store.NewRun{Origin: rulebook.OriginDirect, CredentialDigest: alice}, nil)
		add(store.NewRun{Origin: rulebook.OriginSchedule}, nil)
		add(store.NewRun{Origin: rulebook.OriginJobToken, CredentialDigest: parentDigest}, nil)
	}
	add(store.NewRun{JobID: dup, Origin: rulebook.OriginSchedule}, rulebook.ErrAlreadyExists)
	add(store.NewRun{Origin: rulebook.OriginDirect, CredentialDigest: revoked}, rulebook.ErrBadCredential)
	add(store.NewRun{Origin: rulebook.OriginDirect, CredentialDigest: otherWS}, rulebook.ErrWrongWorkspace)
	add(store.NewRun{Origin: rulebook.OriginJobToken, CredentialDigest: alice}, rulebook.ErrBadCredential)
	add(store.NewRun{Origin: rulebook.OriginJobToken, CredentialDigest: parentDigest, PermissionedAs: "u/else"}, rulebook.ErrPermissionedAs)
	add(store.NewRun{Workspace: "nope", Origin: rulebook.OriginSchedule}, rulebook.ErrNotFound)

	for round := range 3 {
		if round > 0 { // fresh ids and tokens, same cases
			for i := range cases {
				if !errors.Is(cases[i].want, rulebook.ErrAlreadyExists) {
					cases[i].n.JobID = newJobID()
				}
				_, d := rulebook.NewSecret(rulebook.PrefixJob)
				cases[i].n.TokenID, cases[i].n.TokenDigest = rulebook.NewTokenID(), d
			}
		}
		var wg sync.WaitGroup
		for _, c := range cases {
			wg.Go(func() {
				run, err := s.RecordRun(ctx, c.n)
				if c.want != nil {
					require.ErrorIs(t, err, c.want, "%+v", c.n)
					return
				}
				require.NoError(t, err, "%+v", c.n)
				require.False(t, run.CreatedAt.IsZero())
				switch c.n.Origin {
				case rulebook.OriginDirect:
					require.Equal(t, "admin@x", *run.Viewer)
				case rulebook.OriginJobToken:
					require.Equal(t, parent, run.ParentJobID)
					require.Equal(t, "u/admin", run.PermissionedAs)
				default:
					require.Nil(t, run.Viewer)
				}
				got, err := s.Authenticate(ctx, c.n.TokenDigest)
				require.NoError(t, err, "a recorded run's token authenticates at once")
				require.Equal(t, c.n.JobID, got.JobID)

				require.NoError(t, s.FinishRun(ctx, "w", c.n.JobID))
				_, err = s.Authenticate(ctx, c.n.TokenDigest)
				require.ErrorIs(t, err, rulebook.ErrBadCredential, "a finished run's token is refused at once")
				require.ErrorIs(t, s.FinishRun(ctx, "other", c.n.JobID), rulebook.ErrNotFound)
				require.NoError(t, s.FinishRun(ctx, "w", c.n.JobID), "finishing twice succeeds")
			})
		}
		wg.Wait()
	}
	// The parent finished: a child is refused.
	require.NoError(t, s.FinishRun(ctx, "w", parent))
	_, d := rulebook.NewSecret(rulebook.PrefixJob)
	_, err = s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: newJobID(), Origin: rulebook.OriginJobToken,
		CredentialDigest: parentDigest, TokenID: rulebook.NewTokenID(), TokenDigest: d, ExpiresAt: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, rulebook.ErrBadCredential)
}

// RecordRun and FinishRun are one round trip each (was 6 for RecordRun: BEGIN, workspace,
// credential, run, token, COMMIT): what a job costs policy's database besides its commits.
func TestRecordAndFinishAreOneStatementEach(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	tr := &pgtest.Statements{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	s := store.New(pool)
	require.NoError(t, s.CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, nil))
	_, user := rulebook.NewSecret(rulebook.PrefixUser)
	require.NoError(t, s.CreateUserToken(ctx, store.UserToken{ID: rulebook.NewTokenID(), Digest: user, Workspace: "w",
		Username: "admin", ExpiresAt: time.Now().Add(time.Hour)}))
	parent, parentDigest := liveRun(t, s, "w")
	tr.Take()

	for _, n := range []store.NewRun{
		{Origin: rulebook.OriginDirect, CredentialDigest: user, PermissionedAs: "u/admin"},
		{Origin: rulebook.OriginJobToken, CredentialDigest: parentDigest},
		{Origin: rulebook.OriginSchedule, PermissionedAs: "u/admin"},
	} {
		_, d := rulebook.NewSecret(rulebook.PrefixJob)
		n.Workspace, n.JobID, n.TokenID, n.TokenDigest, n.ExpiresAt = "w", newJobID(), rulebook.NewTokenID(), d, time.Now().Add(time.Hour)
		run, err := s.RecordRun(ctx, n)
		require.NoError(t, err)
		require.Len(t, tr.Take(), 1, "RecordRun (%s) is one statement", n.Origin)
		if n.Origin == rulebook.OriginJobToken {
			require.Equal(t, parent, run.ParentJobID)
		}
		require.NoError(t, s.FinishRun(ctx, "w", n.JobID))
		require.Len(t, tr.Take(), 1, "FinishRun is one statement")
	}
}

// A job is one stream event: RecordRun emits none (no cached answer can be wrong about a run
// that did not exist), FinishRun one "run" update, whose key is what every cache drops the
// job token by; there is no "token" event, because finishing the run is the token's revocation.
func TestOneEventPerJob(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t)
	s := store.New(pool)
	require.NoError(t, s.CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, nil))
	head := func() int { return count(t, pool, `SELECT coalesce(max(id), 0)::int FROM stream_outbox`) }
	before := head()
	jobs := make([]string, 5)
	for i := range jobs {
		jobs[i], _ = liveRun(t, s, "w")
	}
	require.Equal(t, before, head(), "recording runs emits nothing")
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { require.NoError(t, s.FinishRun(ctx, "w", j)) })
	}
	wg.Wait()
	require.NoError(t, s.FinishRun(ctx, "w", jobs[0]), "finishing again")
	rows, err := pool.Query(ctx, `SELECT kind, op, workspace, key, payload ? 'finished_at' FROM stream_outbox WHERE id > $1 ORDER BY id`, before)
	require.NoError(t, err)
	type ev struct {
		Kind, Op, WS, Key string
		Finished          bool
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ev])
	require.NoError(t, err)
	var keys []string
	for _, e := range evs {
		require.Equal(t, ev{"run", "update", "w", e.Key, true}, e)
		keys = append(keys, e.Key)
	}
	require.ElementsMatch(t, jobs, keys, "one event per finished run, none for finishing again")
}

// RecordRun with a parent's job token locks the parent's run: a FinishRun of the parent that
// is under way when the child is recorded makes the child wait, then refuses it. (The old
// statement checked the parent in its snapshot and recorded the child of a run that had just
// finished.)
func TestChildWaitsForParentFinish(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t)
	s := store.New(pool)
	require.NoError(t, s.CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, nil))
	parent, parentDigest := liveRun(t, s, "w")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE run SET finished_at = now() WHERE job_id = $1`, parent)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, d := rulebook.NewSecret(rulebook.PrefixJob)
		_, err := s.RecordRun(ctx, store.NewRun{Workspace: "w", JobID: newJobID(), Origin: rulebook.OriginJobToken,
			CredentialDigest: parentDigest, TokenID: rulebook.NewTokenID(), TokenDigest: d, ExpiresAt: time.Now().Add(time.Hour)})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the child was decided while its parent's finish was in flight: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.ErrorIs(t, err, rulebook.ErrBadCredential, "the parent finished first: its token records no child")
	case <-time.After(10 * time.Second):
		t.Fatal("the child's RecordRun did not return")
	}
}

// A job id is recorded once, even when the same id arrives at once in separate statements (each
// Store batches alone, so 8 Stores are 8 concurrent transactions) and twice within one batch.
func TestJobIDRecordedOnceUnderRace(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t)
	stores := make([]*store.Store, 8)
	for i := range stores {
		stores[i] = store.New(pool)
	}
	require.NoError(t, stores[0].CreateWorkspace(ctx, "w", "W", store.Member{Username: "admin", Email: "admin@x"}, nil))
	for range 5 {
		job := newJobID()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ok, dup int
		for i := range 2 * len(stores) {
			wg.Go(func() {
				_, d := rulebook.NewSecret(rulebook.PrefixJob)
				_, err := stores[i%len(stores)].RecordRun(ctx, store.NewRun{Workspace: "w", JobID: job, PermissionedAs: "u/admin",
					Origin: rulebook.OriginSchedule, TokenID: rulebook.NewTokenID(), TokenDigest: d, ExpiresAt: time.Now().Add(time.Hour)})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					ok++
					return
				}
				require.ErrorIs(t, err, rulebook.ErrAlreadyExists)
				dup++
			})
		}
		wg.Wait()
		require.Equal(t, 1, ok, "exactly one recording of %s", job)
		require.Equal(t, 2*len(stores)-1, dup)
		require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM run WHERE job_id = $1`, job))
	}
}
