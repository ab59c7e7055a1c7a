package itest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/api"
	"github.com/millwright/millwright/services/roleset/internal/engine"
	"github.com/millwright/millwright/services/roleset/internal/store"
)

// setLoginRow is a datatable_role_set row with its password decrypted.
type setLoginRow struct {
	login, instance, password string
}

// setLogins reads every set-login row of roleset's database, passwords decrypted.
func (f *fixture) setLogins(t *testing.T) map[string]setLoginRow {
	t.Helper()
	keys := f.keyring(t)
	rows, err := f.r.pool.Query(context.Background(), `SELECT cluster_id, login, instance_id, password_enc FROM datatable_role_set`)
	require.NoError(t, err)
	out := map[string]setLoginRow{}
	for rows.Next() {
		var c string
		var r setLoginRow
		var enc []byte
		require.NoError(t, rows.Scan(&c, &r.login, &r.instance, &enc))
		r.password, err = keys.Decrypt(enc, "roleset:"+c+"/"+r.login)
		require.NoError(t, err)
		out[r.login] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// onCluster reports whether a role of that name exists on the target cluster.
func (f *fixture) onCluster(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.superDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, name).Scan(&ok))
	return ok
}

// resolveSet resolves a viewer on replica r, caches dropped first, and returns the set login.
func (f *fixture) resolveSet(t *testing.T, r *replica, viewer string) *rolesetv1.ResolveConnectionResponse {
	t.Helper()
	r.eng.DropCaches()
	c, err := f.resolve(r, f.viewerRun(viewer), "datatable://main?as=viewer")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(c.GetUser(), "wm_set_"), c.GetUser())
	return c
}

// makeStale backdates the logins' last_used_at past the 30-day sweep threshold.
func (f *fixture) makeStale(t *testing.T, logins ...string) {
	t.Helper()
	tag, err := f.r.pool.Exec(context.Background(),
		`UPDATE datatable_role_set SET last_used_at = now() - interval '31 days' WHERE login = ANY($1)`, logins)
	require.NoError(t, err)
	require.EqualValues(t, len(logins), tag.RowsAffected())
}

// TestSweepBatches: with SweepBatch (2) smaller than the number of stale logins (5), one Sweep
// drops them all, batch after batch (Engine.Sweep loops while a batch was full and made
// progress): Dropped counts 5, their rows and cluster roles are gone, their passwords no longer
// authenticate; the one login used recently keeps its row and logs in.
func TestSweepBatches(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	nord := f.createRole(f.r, "nord_"+randHex(3))
	_, err := f.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "ws", Name: "main",
		DefaultRole: f.emea.GetRoleId(), Roles: map[string]*rolesetv1.Tenants{
			f.emea.GetRoleId(): {Tenants: []string{"g/emea"}},
			f.apac.GetRoleId(): {Tenants: []string{"g/apac"}},
			f.amer.GetRoleId(): {Tenants: []string{"g/amer"}},
			nord.GetRoleId():   {Tenants: []string{"g/nord"}},
		}})
	require.NoError(t, err)
	groups := [][]string{{"emea", "apac"}, {"emea", "amer"}, {"apac", "amer"}, {"emea", "apac", "amer"}, {"emea", "nord"}, {"apac", "nord"}}
	var logins []string
	for i, g := range groups {
		email := fmt.Sprintf("s%d@x", i)
		f.policy.setMember(member{Email: email, Username: fmt.Sprintf("s%d", i), Groups: g})
		logins = append(logins, f.resolveSet(t, f.r, email).GetUser())
	}
	require.Len(t, f.setLogins(t), len(groups), "one login per set")
	stale, fresh := logins[:5], logins[5]
	before := f.setLogins(t)
	f.makeStale(t, stale...)

	sweeper := f.start(func(c *engine.Config) { c.SweepBatch = 2 })
	res, err := sweeper.eng.Sweep(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(stale), res.Dropped, "one sweep drops every stale login, whatever the batch size")
	require.Zero(t, res.Resumed)

	after := f.setLogins(t)
	require.Len(t, after, 1)
	require.Contains(t, after, fresh)
	require.NoError(t, f.canLogin(fresh, after[fresh].password), "the login in use is kept")
	for _, l := range stale {
		require.False(t, f.onCluster(t, l), "%s dropped on the cluster", l)
		require.Error(t, f.canLogin(l, before[l].password))
	}
	var journal int
	require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT count(*) FROM datatable_role_set_retiring`).Scan(&journal))
	require.Zero(t, journal, "every retire finished")
}

// TestSweepOwnInstanceOnly: two engines of different instances share roleset's database and the
// cluster; each made its own set logins for the same viewers (the instance id is in the name).
// Each sweep drops only its own instance's stale logins and finishes only its own interrupted
// retires: the other's logins, stale or not, keep their rows, exist and log in with their
// stored passwords, and a retire journal entry of the other instance stays where it is.
func TestSweepOwnInstanceOnly(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	a := f.r
	b, otherInstance := f.startOther()
	f.policy.setMember(member{Email: "gina@x", Username: "gina", Groups: []string{"emea", "amer"}})
	f.policy.setMember(member{Email: "hal@x", Username: "hal", Groups: []string{"apac", "amer"}})

	aStale, aFresh := f.resolveSet(t, a, "carol@x").GetUser(), f.resolveSet(t, a, "gina@x").GetUser()
	bStale, bFresh := f.resolveSet(t, b, "carol@x").GetUser(), f.resolveSet(t, b, "gina@x").GetUser()
	bHalf := f.resolveSet(t, b, "hal@x").GetUser()
	rows := f.setLogins(t)
	require.Len(t, rows, 5, "each instance has its own logins for the same sets")
	require.Equal(t, f.instance, rows[aStale].instance)
	require.Equal(t, otherInstance, rows[bStale].instance)
	f.makeStale(t, aStale, bStale)

	// An interrupted retire of instance B: row moved to the journal, the login still on the
	// cluster (as after a crash of B right after the row commit).
	lock, ok, err := store.New(b.pool).LockLogin(ctx, f.clusterID, bHalf, false)
	require.NoError(t, err)
	require.True(t, ok)
	moved, err := lock.MoveToJournal(ctx, otherInstance, "test", nil)
	require.NoError(t, err)
	require.True(t, moved)
	lock.Unlock()

	res, err := a.eng.Sweep(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Dropped, "A drops its own stale login only")
	require.Zero(t, res.Resumed, "A does not finish B's retire")
	left := f.setLogins(t)
	require.NotContains(t, left, aStale)
	require.False(t, f.onCluster(t, aStale))
	for _, l := range []string{aFresh, bStale, bFresh} {
		require.Contains(t, left, l)
		require.NoError(t, f.canLogin(l, rows[l].password), "%s must still log in", l)
	}
	require.True(t, f.onCluster(t, bHalf), "B's half-retired login is B's to finish")
	var journal []string
	r, err := a.pool.Query(ctx, `SELECT login FROM datatable_role_set_retiring`)
	require.NoError(t, err)
	journal, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{bHalf}, journal)

	res, err = b.eng.Sweep(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Dropped, "B drops its own stale login")
	require.EqualValues(t, 1, res.Resumed, "B finishes its own retire")
	left = f.setLogins(t)
	require.ElementsMatch(t, []string{aFresh, bFresh}, slices.Collect(maps.Keys(left)))
	require.False(t, f.onCluster(t, bStale))
	require.False(t, f.onCluster(t, bHalf))
	require.NoError(t, f.canLogin(aFresh, rows[aFresh].password))
	require.NoError(t, f.canLogin(bFresh, rows[bFresh].password))
}

// sweepTestTokens recognizes a user token and a job token the way a chained authenticator would
// (roleset's server itself knows only the static admin and service tokens), so the Sweep
// handler's own check is reached with a non-admin identity.
type sweepTestTokens struct{}

const (
	sweepServiceToken = "test-service-token"
	sweepUserToken    = "test-user-token"
	sweepJobToken     = "test-job-token"
)

func (sweepTestTokens) Authenticate(_ context.Context, tok string) (auth.Identity, error) {
	switch tok {
	case sweepUserToken:
		return auth.Identity{Kind: auth.User, Workspace: "ws", Username: "dave", Email: "dave@x", Scopes: []string{auth.ScopeAll}}, nil
	case sweepJobToken:
		return auth.Identity{Kind: auth.Job, Workspace: "ws", JobID: "j1", Scopes: []string{auth.ScopeAll}}, nil
	}
	return auth.Identity{}, auth.ErrUnknownToken
}

// TestSweepRPC: RoleService.Sweep runs the sweep now and returns its counts (two stale logins
// dropped, one interrupted retire finished). It is an admin RPC: a job token (a real one,
// which policy knows) or no token is refused by roleset's authenticator, and a user or job
// identity that an authenticator did accept is refused by the handler (PermissionDenied,
// ROLE_NOT_ALLOWED); none of the refusals sweeps anything. The service token is accepted.
func TestSweepRPC(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	f.policy.setMember(member{Email: "gina@x", Username: "gina", Groups: []string{"emea", "amer"}})
	f.policy.setMember(member{Email: "hal@x", Username: "hal", Groups: []string{"apac", "amer"}})
	stale1, stale2 := f.resolveSet(t, f.r, "carol@x"), f.resolveSet(t, f.r, "gina@x")
	half := f.resolveSet(t, f.r, "hal@x")
	f.makeStale(t, stale1.GetUser(), stale2.GetUser())
	lock, ok, err := store.New(f.r.pool).LockLogin(ctx, f.clusterID, half.GetUser(), false)
	require.NoError(t, err)
	require.True(t, ok)
	moved, err := lock.MoveToJournal(ctx, f.instance, "test", nil)
	require.NoError(t, err)
	require.True(t, moved)
	lock.Unlock()

	untouched := func(t *testing.T) {
		t.Helper()
		rows := f.setLogins(t)
		require.Contains(t, rows, stale1.GetUser())
		require.Contains(t, rows, stale2.GetUser())
		require.NoError(t, f.canLogin(stale1.GetUser(), stale1.GetPassword()))
		require.True(t, f.onCluster(t, half.GetUser()))
	}

	chained := serveAPI(t, &api.Server{Engine: f.r.eng}, auth.Chain{auth.Static{AdminToken: adminToken, ServiceToken: sweepServiceToken}, sweepTestTokens{}})
	refusals := []struct {
		name   string
		roles  rolesetv1.RoleServiceClient
		ctx    context.Context
		code   codes.Code
		reason commonv1.ErrorReason
	}{
		{"no token", f.r.roles(), context.Background(), codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"a run's job token", f.r.roles(), bearerCtx(f.viewerRun("carol@x")), codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"an unknown token", f.r.roles(), bearerCtx("nope"), codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"an authenticated user", rolesetv1.NewRoleServiceClient(chained), bearerCtx(sweepUserToken), codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"an authenticated job", rolesetv1.NewRoleServiceClient(chained), bearerCtx(sweepJobToken), codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
	}
	for _, tc := range refusals {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			resp, err := tc.roles.Sweep(tc.ctx, &rolesetv1.SweepRequest{})
			require.Error(t, err)
			require.Nil(t, resp)
			require.Equal(t, tc.code, status.Code(err), err)
			require.Equal(t, tc.reason, reasonOf(err), err)
			untouched(t)
		})
	}

	t.Run("admin token: runs now and returns the counts", func(t *testing.T) {
		resp, err := f.r.roles().Sweep(adminCtx(), &rolesetv1.SweepRequest{})
		require.NoError(t, err)
		require.EqualValues(t, 2, resp.GetDropped())
		require.EqualValues(t, 1, resp.GetResumed())
		require.Empty(t, f.setLogins(t))
		for _, c := range []*rolesetv1.ResolveConnectionResponse{stale1, stale2, half} {
			require.False(t, f.onCluster(t, c.GetUser()), c.GetUser())
			require.Error(t, f.canLogin(c.GetUser(), c.GetPassword()))
		}
	})

	t.Run("service token: accepted", func(t *testing.T) {
		f.makeStale(t, f.resolveSet(t, f.r, "carol@x").GetUser())
		resp, err := rolesetv1.NewRoleServiceClient(chained).Sweep(bearerCtx(sweepServiceToken), &rolesetv1.SweepRequest{})
		require.NoError(t, err)
		require.EqualValues(t, 1, resp.GetDropped())
		require.Zero(t, resp.GetResumed())
	})
}
