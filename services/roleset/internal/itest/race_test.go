package itest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestRace: 2 replicas x 32 concurrent resolvers over 10 viewers whose group sets map to 4
// distinct role sets: no error, exactly one login per set, and every returned credential
// logs in and sees its rows.
func TestRace(t *testing.T) {
	f := newFixture(t, 2)
	groups := [][]string{{"emea", "apac"}, {"emea", "amer"}, {"apac", "amer"}, {"emea", "apac", "amer"}}
	var viewers []string
	for i := range 10 {
		email := fmt.Sprintf("v%d@x", i)
		f.policy.setMember(member{Email: email, Username: fmt.Sprintf("v%d", i), Groups: groups[i%len(groups)]})
		viewers = append(viewers, email)
	}
	type result struct {
		viewer, user, password string
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	errCh := make(chan error, 64)
	for ri, r := range f.replicas {
		for g := range 32 {
			wg.Go(func() {
				v := viewers[(g+ri)%len(viewers)]
				c, err := f.resolve(r, f.viewerRun(v), "datatable://main?as=viewer")
				if err != nil {
					errCh <- fmt.Errorf("replica %d resolver %d: %w", ri, g, err)
					return
				}
				mu.Lock()
				results = append(results, result{v, c.GetUser(), c.GetPassword()})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	close(errCh)
	for err := range errCh {
		require.NoError(t, err)
	}
	require.Len(t, results, 64)
	logins := map[string]string{}
	for _, r := range results {
		require.True(t, strings.HasPrefix(r.user, "wm_set_"))
		if pw, ok := logins[r.user]; ok {
			require.Equal(t, pw, r.password, "every racer got the same (working) password")
		}
		logins[r.user] = r.password
	}
	require.Len(t, logins, len(groups), "one login per distinct set")
	for u, pw := range logins {
		require.NoError(t, f.canLogin(u, pw), u)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.superDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = ANY($1)`, keys(logins)).Scan(&n))
	require.Equal(t, len(groups), n)
	var rows int
	require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT count(*) FROM datatable_role_set`).Scan(&rows))
	require.Equal(t, len(groups), rows)
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestDisableAcrossReplicas: a role disabled through replica A makes replica B stop handing
// out every set login holding it; the set login is retired (row, NOLOGIN, sessions ended,
// dropped) and an open session on it is terminated.
func TestDisableAcrossReplicas(t *testing.T) {
	f := newFixture(t, 2)
	a, b := f.replicas[0], f.replicas[1]
	ctx := context.Background()
	tok := f.viewerRun("carol@x")
	set, err := f.resolve(b, tok, "datatable://main?as=viewer")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(set.GetUser(), "wm_set_"))
	open, err := pgx.Connect(ctx, loginDSN(set.GetHost(), int(set.GetPort()), set.GetUser(), set.GetPassword(), set.GetDatabase()))
	require.NoError(t, err)
	defer open.Close(ctx)
	_, err = f.resolve(b, tok, "datatable://main?as=viewer") // warm on B
	require.NoError(t, err)

	_, err = a.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: new(false)})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		c, err := f.resolve(b, tok, "datatable://main?as=viewer")
		return err == nil && c.GetUser() == f.emea.GetName()
	}, 5*time.Second, 10*time.Millisecond, "B must stop handing out the set login")
	require.Error(t, f.canLogin(set.GetUser(), set.GetPassword()), "retired login must not authenticate")
	_, err = open.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "the open session must have been terminated")
	var exists bool
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM datatable_role_set WHERE login = $1)`, set.GetUser()).Scan(&exists))
	require.False(t, exists)

	t.Run("disabled role's own login is NOLOGIN", func(t *testing.T) {
		bob, err := f.resolve(a, f.viewerRun("bob@x"), "datatable://main?as=viewer")
		require.Error(t, err, "bob's only role is disabled")
		require.Nil(t, bob)
	})
	t.Run("re-enable: the same set login is re-made on demand", func(t *testing.T) {
		_, err := a.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: new(true)})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			c, err := f.resolve(b, tok, "datatable://main?as=viewer")
			return err == nil && c.GetUser() == set.GetUser() && c.GetPassword() != set.GetPassword()
		}, 5*time.Second, 10*time.Millisecond)
	})
	t.Run("rename retires nothing", func(t *testing.T) {
		c1, err := f.resolve(a, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		_, err = a.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Name: new("apac_renamed_" + randHex(3))})
		require.NoError(t, err)
		c2, err := f.resolve(a, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		require.Equal(t, c1.GetUser(), c2.GetUser())
		require.Equal(t, c1.GetPassword(), c2.GetPassword())
	})
	t.Run("delete retires and drops", func(t *testing.T) {
		c1, err := f.resolve(a, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		_, err = a.roles().DeleteRole(adminCtx(), &rolesetv1.DeleteRoleRequest{RoleId: f.apac.GetRoleId()})
		require.NoError(t, err)
		require.Error(t, f.canLogin(c1.GetUser(), c1.GetPassword()))
		var n int
		conn, err := pgx.Connect(ctx, f.superDSN)
		require.NoError(t, err)
		defer conn.Close(ctx)
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE oid = $1`, int64(f.apac.GetOid())).Scan(&n))
		require.Zero(t, n, "the role is dropped on the cluster")
		perms, err := a.datatables().GetPermissions(adminCtx(), &rolesetv1.GetPermissionsRequest{Workspace: "ws", Name: "main"})
		require.NoError(t, err)
		require.NotContains(t, perms.GetRoles(), f.apac.GetRoleId())
	})
}
