package store_test

import (
	"context"
	"errors"
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
