package itest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestReconcileNeverReEnablesADisabledRole: the reconciler gives an enabled role whose login
// is off its LOGIN back, but only while holding the catalog row. A disable that committed
// first wins (nothing is done), and a disable that comes while the LOGIN is being given waits
// for it, so its NOLOGIN lands last: a stale read can never hand a disabled role its login.
func TestReconcileNeverReEnablesADisabledRole(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	st := f.r.eng.Store()
	id, err := strconv.ParseInt(f.apac.GetRoleId(), 10, 64)
	require.NoError(t, err)

	_, err = f.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: new(false)})
	require.NoError(t, err)
	ran, err := st.WhileRoleEnabled(ctx, id, func() error {
		t.Error("ran for a disabled role")
		return nil
	})
	require.NoError(t, err)
	require.False(t, ran)

	t.Run("the sweep's reconcile takes a disabled role's login away again", func(t *testing.T) {
		superExec(t, f.superDSN, `ALTER ROLE "`+f.apac.GetName()+`" LOGIN`)
		_, err := f.r.eng.Sweep(ctx)
		require.NoError(t, err)
		require.Error(t, f.canLogin(f.apac.GetName(), "whatever"))
		conn, err := pgx.Connect(ctx, f.superDSN)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var can bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT rolcanlogin FROM pg_roles WHERE rolname = $1`, f.apac.GetName()).Scan(&can))
		require.False(t, can, "a disabled role is NOLOGIN after reconcile")
	})

	t.Run("a disable waits for a LOGIN given under the row", func(t *testing.T) {
		_, err := f.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: new(true)})
		require.NoError(t, err)
		inside, release := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			_, err := st.WhileRoleEnabled(ctx, id, func() error { close(inside); <-release; return nil })
			held <- err
		}()
		<-inside
		disabled := make(chan error, 1)
		go func() {
			_, err := st.SetRoleEnabled(ctx, id, false)
			disabled <- err
		}()
		select {
		case err := <-disabled:
			t.Fatalf("the disable committed while the row was held (%v)", err)
		case <-time.After(300 * time.Millisecond):
		}
		close(release)
		require.NoError(t, <-held)
		require.NoError(t, <-disabled)
	})
}
