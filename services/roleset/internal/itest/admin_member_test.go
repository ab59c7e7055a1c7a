package itest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/target"
)

// TestLoginTheAdminIsMemberOfIsUsable: on PG16 and later the admin login that creates a role is
// granted it automatically. A set login the admin is a member of must still verify (the check
// "nobody is a member of a set login" leaves the admin itself out) and be taken back; anyone
// else as a member is still revoked. On PG15 the grant is made by hand here to stand for it.
func TestLoginTheAdminIsMemberOfIsUsable(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	login := f.setLogin(t, f.emea.GetOid(), f.apac.GetOid(), f.amer.GetOid())
	// Ours (a crash after the cluster commit), with the admin made a member of it.
	_, err := f.targetConn(t).EnsureSetLogin(ctx, login, secret.ScramVerifier("known", 4096), []target.Member{
		{Name: f.emea.GetName(), OID: int64(f.emea.GetOid())}, {Name: f.apac.GetName(), OID: int64(f.apac.GetOid())},
		{Name: f.amer.GetName(), OID: int64(f.amer.GetOid())}}, f.targetDB, f.r.eng.LoginProof(login))
	require.NoError(t, err)
	superExec(t, f.superDSN, `GRANT "`+login+`" TO "`+f.adminUser+`"`)
	f.policy.setMember(member{Email: "ivy@x", Username: "ivy", Groups: []string{"emea", "apac", "amer"}})
	c, err := f.resolve(f.r, f.viewerRun("ivy@x"), "datatable://main?as=viewer")
	require.NoError(t, err, "a login the admin is a member of is taken back, not refused")
	require.Equal(t, login, c.GetUser())
	require.Error(t, f.canLogin(login, "known"), "taken back with a new password")
	got, err := query(ctx, c)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5}, got)
	f.checkRows(t)
	// The admin's own membership is left alone: on PG16 it is what lets the admin manage (and
	// later drop) the login, and the admin could not revoke a grant it did not make anyway.
	conn, err := pgx.Connect(ctx, f.superDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var isMember bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'member')`, f.adminUser, login).Scan(&isMember))
	require.True(t, isMember)
}
