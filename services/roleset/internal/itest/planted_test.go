package itest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/store"
)

// planter is another instance on the shared target cluster: a login with CREATEROLE and
// nothing else (no superuser), owning schema evil in the target database. The test connects as
// it with its password (scram-sha-256, as every pg_hba line demands: TestRunbookPrivileges),
// never through SET ROLE from the superuser.
type planter struct {
	name, pass, schema string
	conn               *pgx.Conn
}

func newPlanter(t *testing.T, f *fixture) *planter {
	p := &planter{name: "planter_" + randHex(4), pass: randHex(16), schema: "evil_" + randHex(3)}
	superExec(t, f.superDSN, fmt.Sprintf(`CREATE ROLE %s LOGIN CREATEROLE PASSWORD '%s'`, p.name, p.pass))
	superExec(t, f.targetDSN, fmt.Sprintf(`GRANT CONNECT ON DATABASE "%s" TO %s`, f.targetDB, p.name))
	superExec(t, withDB(f.superDSN, f.targetDB), fmt.Sprintf(`CREATE SCHEMA %s AUTHORIZATION %s`, p.schema, p.name))
	t.Cleanup(func() { // before the harness drops the target database and our roles
		ctx := context.Background()
		_ = privWithConn(withDB(f.superDSN, f.targetDB), func(c *pgx.Conn) error {
			_, _ = c.Exec(ctx, `DROP SCHEMA IF EXISTS `+p.schema+` CASCADE`)
			_, err := c.Exec(ctx, `DROP OWNED BY `+p.name)
			return err
		})
		_ = privWithConn(f.superDSN, func(c *pgx.Conn) error {
			rows, _ := c.Query(ctx, `SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'spy\_%' OR rolname LIKE 'forged\_%'`)
			names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			for _, n := range append(names, p.name) {
				_, _ = c.Exec(ctx, `DROP ROLE IF EXISTS "`+n+`"`)
			}
			return nil
		})
	})
	conn, err := pgx.Connect(context.Background(), loginDSN(f.host, f.port, p.name, p.pass, f.targetDB))
	require.NoError(t, err, "the planter logs in with its password")
	t.Cleanup(func() { conn.Close(context.Background()) })
	p.conn = conn
	var super bool
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super))
	require.False(t, super, "the planter is no superuser")
	return p
}

func (p *planter) exec(t *testing.T, sqls ...string) {
	t.Helper()
	for _, s := range sqls {
		_, err := p.conn.Exec(context.Background(), s)
		require.NoError(t, err, "as the planter: %s", s)
	}
}

// plantedRole is what the superuser sees of a role.
type plantedRole struct {
	privRole
	ConnLimit   int
	ValidUntil  string
	Settings    int    // rows of pg_db_role_setting
	Deps        int    // rows of pg_shdepend but memberships
	RolPassword string // pg_authid.rolpassword
}

func roleState(t *testing.T, f *fixture, name string) plantedRole {
	t.Helper()
	ctx := context.Background()
	super := privConn(t, f.superDSN)
	r := plantedRole{privRole: (&privEnv{super: super}).role(t, name)}
	if !r.Exists {
		return r
	}
	require.NoError(t, super.QueryRow(ctx, `
SELECT a.rolconnlimit, coalesce(a.rolvaliduntil::text, ''), coalesce(a.rolpassword, ''),
       (SELECT count(*) FROM pg_db_role_setting WHERE setrole = a.oid),
       (SELECT count(*) FROM pg_shdepend WHERE refclassid = 'pg_authid'::regclass AND refobjid = a.oid AND classid <> 'pg_auth_members'::regclass)
FROM pg_authid a WHERE a.oid = $1`, r.OID).Scan(&r.ConnLimit, &r.ValidUntil, &r.RolPassword, &r.Settings, &r.Deps))
	return r
}

// requireClean asserts a role in exactly the state roleset gives it: ours, nothing planted.
func requireClean(t *testing.T, r plantedRole, memberOf []string, admin string) {
	t.Helper()
	require.True(t, r.Exists)
	require.True(t, r.Login && r.Inherit, "LOGIN INHERIT")
	require.False(t, r.Super || r.CreateRole || r.CreateDB || r.Replication || r.BypassRLS, "no privileged attribute")
	require.Equal(t, -1, r.ConnLimit)
	require.Equal(t, "infinity", r.ValidUntil)
	require.ElementsMatch(t, memberOf, r.MemberOf, "member of exactly its roles")
	for _, m := range r.Members {
		require.Equal(t, admin, m, "nobody but the admin is a member")
	}
	require.Zero(t, r.Settings, "no role-level setting in any database")
	require.Zero(t, r.Deps, "owns nothing, holds no grant")
}

// TestPlantedRoleState: the target cluster is shared, and another holder of CREATEROLE there
// (the planter) can create roles under our names and change our roles. Two paths reuse a role
// found on the cluster: CreateRole resuming an interrupted creation (the cluster role was made,
// the ready row was not written), and ResolveConnection taking back a set login that has no row
// (a crash after the cluster commit). For each thing a planter can plant, both paths either
// take the role back with it undone, or refuse with CLUSTER_ROLE_TAMPERED / _NOT_OURS and leave
// the role exactly as it was; never hand out a login that carries it.
func TestPlantedRoleState(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	pl := newPlanter(t, f)
	setLogin := f.setLogin(t, f.emea.GetOid(), f.apac.GetOid()) // carol's: groups emea and apac

	// orphanRole makes catalog role name as CreateRole does, then puts its row back to creating:
	// what a crash between the cluster commit and the ready row leaves.
	orphanRole := func(t *testing.T) string {
		name := "vic_" + randHex(4)
		r := f.createRole(f.r, name)
		_, err := f.r.pool.Exec(ctx, `UPDATE datatable_role SET state = 'creating', oid = NULL, password_enc = NULL WHERE id = $1::bigint`, r.GetRoleId())
		require.NoError(t, err)
		return name
	}
	// orphanLogin makes carol's set login and deletes its row: a crash after the cluster commit.
	orphanLogin := func(t *testing.T) {
		_, err := f.resolve(f.r, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		_, err = f.r.pool.Exec(ctx, `DELETE FROM datatable_role_set WHERE login = $1`, setLogin)
		require.NoError(t, err)
		f.r.eng.DropCaches()
	}
	// dropLogin removes carol's set login (row and role) after a case.
	dropLogin := func() {
		_ = privWithConn(withDB(f.superDSN, f.targetDB), func(c *pgx.Conn) error {
			_, _ = c.Exec(ctx, `DROP OWNED BY "`+setLogin+`"`)
			_, err := c.Exec(ctx, `DROP ROLE IF EXISTS "`+setLogin+`"`)
			return err
		})
		_, _ = f.r.pool.Exec(ctx, `DELETE FROM datatable_role_set WHERE login = $1`, setLogin)
		f.r.eng.DropCaches()
	}
	resumeRole := func(name string) (*rolesetv1.CreateRoleResponse, error) {
		return f.r.roles().CreateRole(adminCtx(), &rolesetv1.CreateRoleRequest{ClusterId: f.clusterID, Name: name})
	}
	resolveCarol := func() (*rolesetv1.ResolveConnectionResponse, error) {
		return f.resolve(f.r, f.viewerRun("carol@x"), "datatable://main?as=viewer")
	}
	requireRefused := func(t *testing.T, err error, reason commonv1.ErrorReason, role string) {
		t.Helper()
		require.Error(t, err, "refused")
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.Equal(t, reason, reasonOf(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), role)
	}
	// settingOf logs in with a credential and reads a setting as the session sees it.
	searchPath := func(t *testing.T, c *rolesetv1.ResolveConnectionResponse) string {
		conn := privSession(t, c)
		var sp string
		require.NoError(t, conn.QueryRow(ctx, `SHOW search_path`).Scan(&sp))
		return sp
	}
	carolRows := []int{1, 2, 3, 4}

	// Plants that roleset undoes: after the take-back the role is clean and the viewer's login
	// works with exactly its rows.
	undone := []struct {
		name  string
		plant func(t *testing.T, role string)
		seen  func(r plantedRole) bool // the plant is there before the take-back
		check func(t *testing.T, role string, c *rolesetv1.ResolveConnectionResponse)
	}{
		{"membership into the role", func(t *testing.T, role string) {
			spy := "spy_" + randHex(4)
			pl.exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'spy'`, spy), fmt.Sprintf(`GRANT "%s" TO %s`, role, spy))
		}, func(r plantedRole) bool {
			return len(r.Members) > 1 || (len(r.Members) == 1 && r.Members[0] != f.adminUser)
		}, nil},
		{"membership of the role in another role", func(t *testing.T, role string) {
			// amer's rows (5) are the prize: neither carol's roles nor a new role hold amer.
			pl.exec(t, fmt.Sprintf(`GRANT "%s" TO "%s"`, f.amer.GetName(), role))
		}, func(r plantedRole) bool { return slices.Contains(r.MemberOf, f.amer.GetName()) }, nil},
		{"per-database setting", func(t *testing.T, role string) {
			pl.exec(t, fmt.Sprintf(`ALTER ROLE "%s" IN DATABASE "%s" SET search_path = %s, pg_catalog, public`, role, f.targetDB, pl.schema))
		}, func(r plantedRole) bool { return r.Settings == 1 }, func(t *testing.T, _ string, c *rolesetv1.ResolveConnectionResponse) {
			require.Equal(t, `"$user", public`, searchPath(t, c), "the planted search_path is gone")
		}},
		{"global setting", func(t *testing.T, role string) {
			pl.exec(t, fmt.Sprintf(`ALTER ROLE "%s" SET search_path = %s, pg_catalog, public`, role, pl.schema))
		}, func(r plantedRole) bool { return r.Settings == 1 }, func(t *testing.T, _ string, c *rolesetv1.ResolveConnectionResponse) {
			require.Equal(t, `"$user", public`, searchPath(t, c), "the planted search_path is gone")
		}},
		{"attributes", func(t *testing.T, role string) {
			pl.exec(t, fmt.Sprintf(`ALTER ROLE "%s" CREATEROLE CREATEDB NOINHERIT CONNECTION LIMIT 1 VALID UNTIL '2001-01-01'`, role))
		}, func(r plantedRole) bool { return r.CreateRole && r.CreateDB && !r.Inherit && r.ConnLimit == 1 }, nil},
	}
	for _, tc := range undone {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("CreateRole resuming an interrupted creation", func(t *testing.T) {
				name := orphanRole(t)
				tc.plant(t, name)
				require.True(t, tc.seen(roleState(t, f, name)), "planted")
				resp, err := resumeRole(name)
				require.NoError(t, err, "our role, taken back")
				got := roleState(t, f, name)
				requireClean(t, got, []string{}, f.adminUser)
				require.Contains(t, got.Members, f.adminUser, "granted to the admin")
				require.EqualValues(t, resp.GetRole().GetOid(), got.OID)
			})
			t.Run("ResolveConnection taking back a set login", func(t *testing.T) {
				defer dropLogin()
				orphanLogin(t)
				tc.plant(t, setLogin)
				require.True(t, tc.seen(roleState(t, f, setLogin)), "planted")
				c, err := resolveCarol()
				require.NoError(t, err, "our login, taken back")
				require.Equal(t, setLogin, c.GetUser())
				requireClean(t, roleState(t, f, setLogin), []string{f.emea.GetName(), f.apac.GetName()}, f.adminUser)
				rows, err := query(ctx, c)
				require.NoError(t, err)
				require.Equal(t, carolRows, rows, "exactly carol's rows")
				if tc.check != nil {
					tc.check(t, setLogin, c)
				}
			})
		})
	}

	// Plants that roleset cannot undo (objects in other databases, grants made by others): the
	// take-back is refused and the role left exactly as it was (no new password, nothing reset).
	kept := []struct {
		name  string
		plant func(t *testing.T, role string)
	}{
		{"owned object", func(t *testing.T, role string) {
			tbl := pl.schema + ".owned_" + randHex(3)
			pl.exec(t,
				fmt.Sprintf(`GRANT "%s" TO %s`, role, pl.name), // to give it away, the planter must hold the role
				fmt.Sprintf(`GRANT CREATE ON SCHEMA %s TO "%s"`, pl.schema, role),
				`CREATE TABLE `+tbl+` (x int)`,
				fmt.Sprintf(`ALTER TABLE %s OWNER TO "%s"`, tbl, role),
				fmt.Sprintf(`REVOKE CREATE ON SCHEMA %s FROM "%s"`, pl.schema, role),
				fmt.Sprintf(`REVOKE "%s" FROM %s`, role, pl.name))
		}},
		{"grant on an object", func(t *testing.T, role string) {
			tbl := pl.schema + ".granted_" + randHex(3)
			pl.exec(t, `CREATE TABLE `+tbl+` (x int)`, fmt.Sprintf(`GRANT SELECT, INSERT ON %s TO "%s"`, tbl, role))
		}},
	}
	for _, tc := range kept {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("CreateRole resuming an interrupted creation", func(t *testing.T) {
				name := orphanRole(t)
				tc.plant(t, name)
				before := roleState(t, f, name)
				require.NotZero(t, before.Deps)
				_, err := resumeRole(name)
				requireRefused(t, err, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_TAMPERED, name)
				require.Equal(t, before, roleState(t, f, name), "left exactly as it was")
				var state string
				require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT state FROM datatable_role WHERE cluster_id = $1 AND name = $2`, f.clusterID, name).Scan(&state))
				require.Equal(t, "creating", state, "kept for a retry once the cluster is cleaned")
			})
			t.Run("ResolveConnection taking back a set login", func(t *testing.T) {
				defer dropLogin()
				orphanLogin(t)
				tc.plant(t, setLogin)
				before := roleState(t, f, setLogin)
				_, err := resolveCarol()
				requireRefused(t, err, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_TAMPERED, setLogin)
				require.Equal(t, before, roleState(t, f, setLogin), "left exactly as it was")
				_, err = store.New(f.r.pool).RoleSet(ctx, f.clusterID, setLogin)
				require.Error(t, err, "no row: the login is handed to nobody")
			})
		})
	}

	// A role the planter made itself under our name, with a comment that claims to be ours:
	// the predictable plain marker, or a real proof copied from one of our roles.
	t.Run("forged comment", func(t *testing.T) {
		var ours string
		require.NoError(t, privConn(t, f.superDSN).QueryRow(ctx, `SELECT shobj_description($1::oid, 'pg_authid')`, f.emea.GetOid()).Scan(&ours))
		t.Run("CreateRole", func(t *testing.T) {
			var seq string
			require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT pg_get_serial_sequence('datatable_role', 'id')`).Scan(&seq))
			for i, comment := range []func(next int64) string{
				func(next int64) string { return fmt.Sprintf("millwright roleset %s role %d", f.instance, next) },
				func(int64) string { return ours },
			} {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					var next int64
					require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT last_value + 1 FROM `+seq).Scan(&next))
					name := "forged_" + randHex(4)
					pl.exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'planter-knows'`, name),
						fmt.Sprintf(`COMMENT ON ROLE %s IS '%s'`, name, comment(next)))
					before := roleState(t, f, name)
					_, err := resumeRole(name)
					requireRefused(t, err, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_NOT_OURS, name)
					require.Equal(t, before, roleState(t, f, name), "left alone")
					require.NoError(t, f.canLogin(name, "planter-knows"), "still the planter's password")
					var n int
					require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT count(*) FROM datatable_role WHERE name = $1`, name).Scan(&n))
					require.Zero(t, n, "no catalog row names it")
				})
			}
		})
		t.Run("set login", func(t *testing.T) {
			defer dropLogin()
			pl.exec(t, fmt.Sprintf(`CREATE ROLE "%s" LOGIN PASSWORD 'planter-knows' IN ROLE "%s", "%s"`, setLogin, f.emea.GetName(), f.apac.GetName()),
				fmt.Sprintf(`COMMENT ON ROLE "%s" IS 'millwright roleset %s login %s proof k1:%s'`, setLogin, f.instance, setLogin, randHex(16)))
			before := roleState(t, f, setLogin)
			_, err := resolveCarol()
			requireRefused(t, err, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_NOT_OURS, setLogin)
			require.Equal(t, before, roleState(t, f, setLogin), "left alone")
			require.NoError(t, f.canLogin(setLogin, "planter-knows"), "still the planter's password")
		})
	})
}
