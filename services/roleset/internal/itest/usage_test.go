package itest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/roleset/internal/api"
)

// lastUsedAt reads a set login's last_used_at from roleset's database.
func (f *fixture) lastUsedAt(t *testing.T, login string) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, f.r.pool.QueryRow(context.Background(),
		`SELECT last_used_at FROM datatable_role_set WHERE login = $1`, login).Scan(&at))
	return at
}

// TestLastUsedAtOncePerDay: a set login's last_used_at is written at most once a day. Uses
// within the day (cold resolves, which read the row, and warm ones) leave it as it is, even
// 23 h old; once it is older than 24 h, the next resolve that reads the row moves it to now.
// The warm path only writes from the cache entry's own once-a-day clock, so the caches are
// dropped before each resolve that must reach the row.
func TestLastUsedAtOncePerDay(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	resolveCold := func(t *testing.T) *rolesetv1.ResolveConnectionResponse {
		t.Helper()
		f.r.eng.DropCaches()
		c, err := f.resolve(f.r, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(c.GetUser(), "wm_set_"), c.GetUser())
		return c
	}
	first := resolveCold(t)
	login := first.GetUser()
	created := f.lastUsedAt(t, login)

	t.Run("a second use the same day writes nothing", func(t *testing.T) {
		time.Sleep(20 * time.Millisecond) // a rewrite would show as a later timestamp
		resolveCold(t)
		tok := f.viewerRun("carol@x")
		for range 5 { // and the warm path neither
			_, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
			require.NoError(t, err)
		}
		require.True(t, created.Equal(f.lastUsedAt(t, login)), "last_used_at rewritten within the day")
	})

	t.Run("23 hours old: still not rewritten", func(t *testing.T) {
		_, err := f.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '23 hours' WHERE login = $1`, login)
		require.NoError(t, err)
		before := f.lastUsedAt(t, login)
		resolveCold(t)
		require.True(t, before.Equal(f.lastUsedAt(t, login)), "last_used_at rewritten although younger than a day")
	})

	t.Run("25 hours old: the next use moves it to now", func(t *testing.T) {
		_, err := f.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '25 hours' WHERE login = $1`, login)
		require.NoError(t, err)
		old := f.lastUsedAt(t, login)
		var dbNow time.Time
		require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
		c := resolveCold(t)
		require.Equal(t, login, c.GetUser())
		require.Equal(t, first.GetPassword(), c.GetPassword(), "the same login, not re-made")
		moved := f.lastUsedAt(t, login)
		require.True(t, moved.After(old), "last_used_at not written after a day")
		require.False(t, moved.Before(dbNow), "moved to the time of the use (%s), got %s", dbNow, moved)

		time.Sleep(20 * time.Millisecond)
		resolveCold(t)
		require.True(t, moved.Equal(f.lastUsedAt(t, login)), "written twice in a day")
	})
}

// TestWarmPathNoDatabase: once warm, ResolveConnection sends no statement at all to roleset's
// database (so certainly no write), for each kind of login: a role's own, a set login and
// admin. The engine under test runs on a pool with a statement counter and shares the
// replica's cache (kept live and invalidated by the replica's streams); it is served over gRPC
// with the harness's interceptors. The counter is checked to see the cold path, so a zero is
// not a tracer that sees nothing.
func TestWarmPathNoDatabase(t *testing.T) {
	const warm = 50
	f := newFixture(t, 1)
	ctx := context.Background()
	counter := &pgtest.Statements{}
	eng, _ := f.newEngine(t, f.newPool(t, counter), f.r.cache)
	t.Cleanup(eng.Close)
	conns := rolesetv1.NewConnectionServiceClient(serveAPI(t, &api.Server{Engine: eng}, adminOnly))

	cases := []struct {
		name, token, ref string
		kind             rolesetv1.ConnectionKind
	}{
		{"own login", f.viewerRun("alice@x"), "datatable://main?as=viewer", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE},
		{"set login", f.viewerRun("carol@x"), "datatable://main?as=viewer", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET},
		{"admin", f.policy.run("u/boss", policyv1.RunOrigin_RUN_ORIGIN_DIRECT, "boss@x"), "datatable://main?role=admin", rolesetv1.ConnectionKind_CONNECTION_KIND_ADMIN},
	}
	// The fixture's own writes (data table, permissions) reach the cache as stream events; wait
	// until the replica's listener has delivered them all, so none drops an entry mid-measure.
	require.Eventually(t, func() bool {
		h, err := stream.Head(ctx, f.r.pool)
		return err == nil && f.r.stream.Position() >= h
	}, 10*time.Second, 5*time.Millisecond)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &rolesetv1.ResolveConnectionRequest{Reference: tc.ref}
			counter.Take()
			first, err := conns.ResolveConnection(bearerCtx(tc.token), req)
			require.NoError(t, err)
			require.Equal(t, tc.kind, first.GetKind())
			require.NotEmpty(t, counter.Take(), "the cold path reads the catalog through the counted pool")
			// The fake policy's setup events (members) arrive asynchronously and drop caches:
			// settle until one resolve is served warm before measuring.
			require.Eventually(t, func() bool {
				_, err := conns.ResolveConnection(bearerCtx(tc.token), req)
				return err == nil && len(counter.Take()) == 0
			}, 10*time.Second, 20*time.Millisecond, "the cache never settled")
			calls := f.policy.Calls()
			for range warm {
				c, err := conns.ResolveConnection(bearerCtx(tc.token), req)
				require.NoError(t, err)
				require.Equal(t, first.GetUser(), c.GetUser())
				require.Equal(t, first.GetPassword(), c.GetPassword())
			}
			require.Empty(t, counter.Take(), "statements sent to roleset's database by %d warm resolves", warm)
			require.Equal(t, calls, f.policy.Calls(), "policy calls on the warm path")
			require.NoError(t, f.canLogin(first.GetUser(), first.GetPassword()))
		})
	}
}
