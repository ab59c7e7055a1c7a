package itest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/datatableref"
	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/target"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// checkRows asserts the invariant: every datatable_role_set row names a login that
// authenticates with the password the row holds.
func (f *fixture) checkRows(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	keys := f.keyring(t)
	rows, err := f.r.pool.Query(ctx, `SELECT cluster_id, login, password_enc FROM datatable_role_set`)
	require.NoError(t, err)
	type row struct {
		c, l string
		pw   []byte
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.c, &x.l, &x.pw)
	})
	require.NoError(t, err)
	for _, r := range all {
		pw, err := keys.Decrypt(r.pw, "roleset:"+r.c+"/"+r.l)
		require.NoError(t, err)
		require.NoError(t, f.canLogin(r.l, pw), "row %s must authenticate", r.l)
	}
	return len(all)
}

func (f *fixture) targetConn(t *testing.T) *target.Cluster {
	tc, err := target.Open(context.Background(), target.Config{Host: f.host, Port: f.port, User: f.adminUser, Password: f.adminPass, Database: f.targetDB})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	return tc
}

func (f *fixture) setLogin(t *testing.T, roles ...uint32) string {
	l, err := tenancy.SetLoginName(f.instance, roles)
	require.NoError(t, err)
	return l
}

func TestCrashWindows(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	tc := f.targetConn(t)
	members := []target.Member{{Name: f.emea.GetName(), OID: int64(f.emea.GetOid())}, {Name: f.apac.GetName(), OID: int64(f.apac.GetOid())}}
	carolLogin := f.setLogin(t, f.emea.GetOid(), f.apac.GetOid())

	t.Run("ensure: login committed, row not written", func(t *testing.T) {
		// What a crash after the cluster commit leaves: a login with a password nobody has.
		lost := secret.NewPassword()
		_, err := tc.EnsureSetLogin(ctx, carolLogin, secret.ScramVerifier(lost, 4096), members, f.targetDB, f.r.eng.LoginProof(carolLogin))
		require.NoError(t, err)
		c, err := f.resolve(f.r, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		require.Equal(t, carolLogin, c.GetUser())
		require.NotEqual(t, lost, c.GetPassword(), "taken back with a new password")
		require.Error(t, f.canLogin(carolLogin, lost))
		got, err := query(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 3, 4}, got)
		f.checkRows(t)
	})

	t.Run("ensure: our login found with extra memberships and a member is taken back clean", func(t *testing.T) {
		login := f.setLogin(t, f.emea.GetOid(), f.amer.GetOid())
		// Ours (a crash after the cluster commit), then changed by someone else.
		_, err := tc.EnsureSetLogin(ctx, login, secret.ScramVerifier("known", 4096),
			[]target.Member{{Name: f.emea.GetName(), OID: int64(f.emea.GetOid())}, {Name: f.amer.GetName(), OID: int64(f.amer.GetOid())}},
			f.targetDB, f.r.eng.LoginProof(login))
		require.NoError(t, err)
		superExec(t, f.superDSN,
			`GRANT "`+f.apac.GetName()+`" TO "`+login+`"`,
			`CREATE ROLE snoop_`+strings.TrimPrefix(login, "wm_set_")[:8]+` LOGIN IN ROLE "`+login+`"`)
		f.policy.setMember(member{Email: "gina@x", Username: "gina", Groups: []string{"emea", "amer"}})
		c, err := f.resolve(f.r, f.viewerRun("gina@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		require.Equal(t, login, c.GetUser())
		got, err := query(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 5}, got, "the extra apac membership was revoked")
		require.Error(t, f.canLogin(login, "known"))
		li, err := tc.Lookup(ctx, login)
		require.NoError(t, err)
		require.Empty(t, li.Members, "nobody may be a member of a set login")
		superExec(t, f.superDSN, `DROP ROLE snoop_`+strings.TrimPrefix(login, "wm_set_")[:8])
	})

	t.Run("ensure: connection cut at random points", func(t *testing.T) {
		f.policy.setMember(member{Email: "hal@x", Username: "hal", Groups: []string{"apac", "amer"}})
		ref, err := datatableref.Parse("datatable://main?as=viewer")
		require.NoError(t, err)
		tok := f.viewerRun("hal@x")
		for i := range 30 {
			d := time.Duration(rand.IntN(12000)) * time.Microsecond
			cctx, cancel := context.WithTimeout(ctx, d)
			_, _ = f.replicas[i%2].eng.Resolve(cctx, tok, ref)
			cancel()
			f.checkRows(t)
			if i%10 == 9 { // a cut ensure may have left a login without a row: retire it
				login := f.setLogin(t, f.apac.GetOid(), f.amer.GetOid())
				_, _ = f.r.pool.Exec(ctx, `DELETE FROM datatable_role_set WHERE login = $1`, login)
				f.r.eng.DropCaches()
			}
		}
		c, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
		require.NoError(t, err)
		require.NoError(t, f.canLogin(c.GetUser(), c.GetPassword()))
		f.checkRows(t)
	})

	retireCrash := func(t *testing.T, after string) {
		c, err := f.resolve(f.r, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		st := store.New(f.r.pool)
		lock, ok, err := st.LockLogin(ctx, f.clusterID, c.GetUser(), false)
		require.NoError(t, err)
		require.True(t, ok)
		moved, err := lock.MoveToJournal(ctx, f.instance, "test", nil)
		require.NoError(t, err)
		require.True(t, moved)
		if after == "nologin" {
			superExec(t, f.targetDSN, `ALTER ROLE "`+c.GetUser()+`" NOLOGIN`)
		}
		lock.Unlock() // the crash: the session lock goes with the connection
		f.checkRows(t)
		res, err := f.replicas[1].eng.Sweep(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Resumed)
		require.Error(t, f.canLogin(c.GetUser(), c.GetPassword()))
		li, err := tc.Lookup(ctx, c.GetUser())
		require.NoError(t, err)
		require.False(t, li.Exists, "the reconciler dropped it")
		f.r.eng.DropCaches()
		again, err := f.resolve(f.r, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err, "a dropped login is re-made on demand")
		require.NoError(t, f.canLogin(again.GetUser(), again.GetPassword()))
	}
	t.Run("retire: crash after the row commit", func(t *testing.T) { retireCrash(t, "row") })
	t.Run("retire: crash after NOLOGIN", func(t *testing.T) { retireCrash(t, "nologin") })

	t.Run("disable: crash after the catalog commit", func(t *testing.T) {
		c, err := f.resolve(f.r, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		_, err = store.New(f.r.pool).SetRoleEnabled(ctx, mustID(f.apac.GetRoleId()), false)
		require.NoError(t, err) // ...and the process died here
		_, err = f.replicas[1].eng.Sweep(ctx)
		require.NoError(t, err)
		require.Error(t, f.canLogin(c.GetUser(), c.GetPassword()), "the reconciler retired the set login")
		ok, err := tc.CanLogin(ctx, int64(f.apac.GetOid()))
		require.NoError(t, err)
		require.False(t, ok, "and made the role's own login NOLOGIN")
		_, err = f.replicas[1].eng.SetRoleEnabled(ctx, mustID(f.apac.GetRoleId()), true)
		require.NoError(t, err)
		f.checkRows(t)
	})

	t.Run("sweep: two replicas at once drop each unused login once", func(t *testing.T) {
		for _, v := range []string{"carol@x", "gina@x", "hal@x"} {
			f.r.eng.DropCaches()
			_, err := f.resolve(f.r, f.viewerRun(v), "datatable://main?as=viewer")
			require.NoError(t, err)
		}
		n := f.checkRows(t)
		require.GreaterOrEqual(t, n, 3)
		_, err := f.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '31 days'`)
		require.NoError(t, err)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var dropped int64
		var errs []error
		for _, r := range f.replicas {
			wg.Go(func() {
				res, err := r.eng.Sweep(ctx)
				mu.Lock()
				defer mu.Unlock()
				dropped += res.Dropped
				errs = append(errs, err)
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		require.EqualValues(t, n, dropped)
		require.Zero(t, f.checkRows(t))
		var left int
		require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT count(*) FROM datatable_role_set_retiring`).Scan(&left))
		require.Zero(t, left)
	})
}

func mustID(s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}
