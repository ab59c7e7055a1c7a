package itest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/store"
)

// TestReconcileNeverReEnablesADisabledRole: the reconciler gives an enabled role whose login
// is off its LOGIN back, but only while holding the catalog row. A disable that committed
// first wins (nothing is done), and a disable that comes while the LOGIN is being given waits
// for it, so its NOLOGIN lands last: a stale read can never hand a disabled role its login.
func TestReconcileNeverReEnablesADisabledRole(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	st := store.New(f.r.pool)
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

// TestReconcileOwnInstanceOnly: two instances share roleset's database and the cluster.
// Reconcile on instance A works on A's catalog rows only: B's role caught mid-delete is left
// for B (A neither retires it nor deletes its row), and rows made before instances were
// recorded are claimed only by the instance whose marker the role carries.
func TestReconcileOwnInstanceOnly(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	a := f.r
	b, other := f.startOther()
	bRole := f.createRole(b, "bdel_"+randHex(3))
	bLegacy := f.createRole(b, "bleg_"+randHex(3))
	canLogin := func(name string) bool {
		var ok bool
		conn, err := pgx.Connect(ctx, f.superDSN)
		require.NoError(t, err)
		defer conn.Close(ctx)
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce((SELECT rolcanlogin FROM pg_roles WHERE rolname = $1), false)`, name).Scan(&ok))
		return ok
	}
	instanceOf := func(id string) string {
		var inst *string
		require.NoError(t, a.pool.QueryRow(ctx, `SELECT instance_id FROM datatable_role WHERE id = $1`, mustID(id)).Scan(&inst))
		if inst == nil {
			return ""
		}
		return *inst
	}
	// B crashed in the middle of deleting bRole; two rows predate the instance column.
	_, err := a.pool.Exec(ctx, `UPDATE datatable_role SET state = 'deleting' WHERE id = $1`, mustID(bRole.GetRoleId()))
	require.NoError(t, err)
	_, err = a.pool.Exec(ctx, `UPDATE datatable_role SET instance_id = NULL WHERE id = ANY($1)`,
		[]int64{mustID(bLegacy.GetRoleId()), mustID(f.emea.GetRoleId())})
	require.NoError(t, err)

	require.NoError(t, a.eng.Reconcile(ctx))
	require.True(t, canLogin(bRole.GetName()), "A retired B's role")
	var state string
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT state FROM datatable_role WHERE id = $1`, mustID(bRole.GetRoleId())).Scan(&state))
	require.Equal(t, "deleting", state, "A finished B's delete")
	require.Equal(t, f.instance, instanceOf(f.emea.GetRoleId()), "A claims its own legacy row")
	require.Empty(t, instanceOf(bLegacy.GetRoleId()), "A claimed B's legacy row")

	require.NoError(t, b.eng.Reconcile(ctx))
	require.False(t, f.onCluster(t, bRole.GetName()), "B finishes its own delete")
	require.Equal(t, other, instanceOf(bLegacy.GetRoleId()))
}
