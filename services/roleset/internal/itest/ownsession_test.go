package itest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestDisableEndsOwnSessions: a viewer of exactly one role connects as that role's own login
// and keeps the session open; disabling the role (UpdateRole enabled=false) terminates that
// session (NOLOGIN alone would leave it working, postgres-roles.md §6), no backend of the role
// is left, and the login can no longer log in (28000: not permitted to log in). Enabling it
// again gives the same login back, with the same password.
func TestDisableEndsOwnSessions(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	c, err := f.resolve(f.r, f.viewerRun("alice@x"), "datatable://main?as=viewer")
	require.NoError(t, err)
	require.Equal(t, rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, c.GetKind())
	require.Equal(t, f.emea.GetName(), c.GetUser(), "the role's own login")

	open, err := pgx.Connect(ctx, loginDSN(c.GetHost(), int(c.GetPort()), c.GetUser(), c.GetPassword(), c.GetDatabase()))
	require.NoError(t, err)
	defer open.Close(context.Background())
	var n int
	require.NoError(t, open.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n))
	require.Equal(t, 2, n, "the open session works and sees emea's rows")

	_, err = f.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.emea.GetRoleId(), Enabled: new(false)})
	require.NoError(t, err)

	_, err = open.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "the open session must have been terminated")
	super, err := pgx.Connect(ctx, f.superDSN)
	require.NoError(t, err)
	defer super.Close(ctx)
	var backends int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, c.GetUser()).Scan(&backends))
	require.Zero(t, backends, "no session of the disabled role is left")

	err = f.canLogin(c.GetUser(), c.GetPassword())
	require.Error(t, err, "a disabled role's login must not authenticate")
	var pg *pgconn.PgError
	require.ErrorAs(t, err, &pg, err)
	require.Equal(t, "28000", pg.Code, "refused as NOLOGIN: %v", err)

	_, err = f.resolve(f.r, f.viewerRun("alice@x"), "datatable://main?as=viewer")
	require.Error(t, err, "a viewer of only a disabled role resolves nothing")

	t.Run("enable gives the same login back", func(t *testing.T) {
		_, err := f.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.emea.GetRoleId(), Enabled: new(true)})
		require.NoError(t, err)
		require.NoError(t, f.canLogin(c.GetUser(), c.GetPassword()))
	})
}
