package itest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/roleset/internal/app"
)

// The message PostgreSQL 15 gives a pg_terminate_backend of another role's session without
// pg_signal_backend (docs/operations.md quotes it); PG16 rewords it.
const (
	noSignalMsgPG15 = "must be a member of the role whose process is being terminated or member of pg_signal_backend"
	noSignalMsgPG16 = "permission denied to terminate process"
)

// privEnv is a target cluster whose admin login holds exactly the rows of the runbook's table
// "roleset: the admin login on each target cluster" (docs/operations.md) and nothing more: no
// superuser, no ownership of the database or of schema public, CONNECT on the maintenance
// database as its only database privilege. The data table's tables are owned by a separate
// login (the data table's admin, as in docs/datatable-policies.md), which grants to the catalog
// roles; the superuser stands in for the cluster's DBA.
type privEnv struct {
	*fixture           // the harness env and one replica; the fixture's own roles are unused
	super    *pgx.Conn // superuser, database "postgres"
	superDB  *pgx.Conn // superuser, the target database
	version  int       // server_version_num
	signal   bool      // whether the admin is a member of pg_signal_backend
	owner    string    // the data table's owner login
	connect  string    // NOLOGIN group holding CONNECT on the target database
	a, b     *rolesetv1.Role
}

// privConn is a connection for the test's own queries, closed with the test.
func privConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// newPrivEnv builds the harness env (newEnv), then replaces the harness's admin login, which
// also owns schema public of the target database (a convenience of the other tests, not a row
// of the runbook), with one holding exactly the runbook's privileges; with signal false it is
// the same login without pg_signal_backend.
func newPrivEnv(t *testing.T, signal bool) *privEnv {
	ctx := context.Background()
	admin, owner, connect := "rsadm_"+randHex(4), "dtown_"+randHex(4), "dtconn_"+randHex(4)
	superDSN := pgtest.Superuser(t)
	t.Cleanup(func() { // registered first, so it runs last: after the target database is dropped
		_ = privWithConn(superDSN, func(c *pgx.Conn) error {
			for _, r := range []string{admin, owner, connect} {
				_, _ = c.Exec(ctx, `DROP ROLE IF EXISTS "`+r+`"`)
			}
			return nil
		})
	})
	e := newEnv(t)
	p := &privEnv{fixture: &fixture{env: e}, super: privConn(t, e.superDSN), superDB: privConn(t, withDB(e.superDSN, e.targetDB)),
		signal: signal, owner: owner, connect: connect}
	require.NoError(t, p.super.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&p.version))

	schemaOwner := "pg_database_owner" // the PG15 default
	if p.version < 150000 {
		schemaOwner = "CURRENT_USER"
	}
	superExec(t, p.superTarget(), `ALTER SCHEMA public OWNER TO `+schemaOwner)
	superExec(t, p.superDSN, `DROP ROLE "`+e.adminUser+`"`)

	e.adminUser, e.adminPass = admin, randHex(16)
	db := `"` + e.targetDB + `"`
	superExec(t, p.superDSN,
		// NOSUPERUSER, NOCREATEDB, NOREPLICATION, NOBYPASSRLS and INHERIT are the defaults.
		fmt.Sprintf(`CREATE ROLE %s LOGIN CREATEROLE PASSWORD '%s'`, admin, e.adminPass),
		// CONNECT is then the admin's own grant, not PUBLIC's.
		`REVOKE ALL ON DATABASE `+db+` FROM PUBLIC`,
		`GRANT CONNECT ON DATABASE `+db+` TO `+admin)
	if signal {
		superExec(t, p.superDSN, `GRANT pg_signal_backend TO `+admin)
	}
	e.targetDSN = loginDSN(e.host, e.port, e.adminUser, e.adminPass, e.targetDB)

	// The data table's owner (owns the tables, grants on them to catalog roles) and the group
	// through which catalog roles get CONNECT (not granted to each role: a database grant held
	// by a role is one more thing its delete would have to revoke).
	superExec(t, p.superDSN,
		fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, owner, randHex(16)),
		`GRANT CONNECT ON DATABASE `+db+` TO `+owner,
		`CREATE ROLE `+connect+` NOLOGIN`,
		`GRANT CONNECT ON DATABASE `+db+` TO `+connect)
	superExec(t, p.superTarget(), `GRANT CREATE ON SCHEMA public TO `+owner)

	p.r = e.start()
	e.registerCluster(p.r)
	return p
}

func privWithConn(dsn string, fn func(*pgx.Conn) error) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return fn(c)
}

// privRole is a role as pg_roles and pg_auth_members show it.
type privRole struct {
	Exists bool
	OID    int64
	// pg_roles attributes
	Super, CreateRole, CreateDB, Replication, BypassRLS, Login, Inherit bool
	// Scram: pg_authid.rolpassword is a SCRAM-SHA-256 verifier.
	Scram bool
	// MemberOf: the roles it is a member of; Members: the roles that are members of it.
	MemberOf, Members []string
	// Comment: COMMENT ON ROLE (roleset's ownership marker).
	Comment string
}

// superTarget is the superuser's DSN on the target database.
func (p *privEnv) superTarget() string { return withDB(p.superDSN, p.targetDB) }

func (p *privEnv) role(t testing.TB, name string) privRole {
	t.Helper()
	r := privRole{MemberOf: []string{}, Members: []string{}}
	err := p.super.QueryRow(context.Background(), `
SELECT r.oid::bigint, r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolreplication, r.rolbypassrls, r.rolcanlogin, r.rolinherit,
       coalesce((SELECT a.rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid a WHERE a.oid = r.oid), false),
       coalesce((SELECT array_agg(DISTINCT g.rolname::text) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid), '{}'),
       coalesce((SELECT array_agg(DISTINCT g.rolname::text) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.member WHERE m.roleid = r.oid), '{}'),
       coalesce(shobj_description(r.oid, 'pg_authid'), '')
FROM pg_roles r WHERE r.rolname = $1`, name).Scan(&r.OID, &r.Super, &r.CreateRole, &r.CreateDB, &r.Replication, &r.BypassRLS,
		&r.Login, &r.Inherit, &r.Scram, &r.MemberOf, &r.Members, &r.Comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return privRole{}
	}
	require.NoError(t, err)
	r.Exists = true
	return r
}

// backends counts the server processes of a role (by usesysid: a dropped role's sessions have
// a NULL usename).
func (p *privEnv) backends(t testing.TB, oid int64) int {
	t.Helper()
	var n int
	require.NoError(t, p.super.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE usesysid = $1::oid`, oid).Scan(&n))
	return n
}

// session opens a connection with a credential ResolveConnection returned (real SCRAM).
func privSession(t testing.TB, c *rolesetv1.ResolveConnectionResponse) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), loginDSN(c.GetHost(), int(c.GetPort()), c.GetUser(), c.GetPassword(), c.GetDatabase()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func privVisible(conn *pgx.Conn) ([]int, error) {
	rows, err := conn.Query(context.Background(), `SELECT id FROM orders ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

func privSQLState(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// checkAdmin asserts the admin login's attributes, memberships, ownerships and grants: exactly
// the runbook's rows, so the test fails if this setup (or the harness it builds on) drifts.
func (p *privEnv) checkAdmin(t *testing.T) {
	ctx := context.Background()
	adm := p.role(t, p.adminUser)
	require.True(t, adm.Exists)
	require.True(t, adm.Login, "LOGIN")
	require.True(t, adm.Scram, "its password is a SCRAM verifier")
	require.True(t, adm.CreateRole, "CREATEROLE")
	require.True(t, adm.Inherit, "INHERIT (the default)")
	require.False(t, adm.Super, "NOSUPERUSER")
	require.False(t, adm.CreateDB, "NOCREATEDB")
	require.False(t, adm.Replication, "NOREPLICATION")
	require.False(t, adm.BypassRLS, "NOBYPASSRLS")
	want := []string{}
	if p.signal {
		want = []string{"pg_signal_backend"}
	}
	require.Equal(t, want, adm.MemberOf, "member of pg_signal_backend and of nothing else")
	require.Empty(t, adm.Members, "no role inherits from the admin")

	// Shared dependencies (every database and the shared catalogs): it owns nothing, and its
	// only privilege on any object is CONNECT on the target database. (Memberships, which
	// PG16 also records here, are checked through pg_auth_members above.)
	rows, err := p.super.Query(ctx, `
SELECT s.deptype::text || ' ' || s.classid::regclass::text || ' ' || coalesce(d.datname::text, s.objid::text)
FROM pg_shdepend s LEFT JOIN pg_database d ON s.classid = 'pg_database'::regclass AND d.oid = s.objid
WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = $1::oid AND s.classid <> 'pg_auth_members'::regclass ORDER BY 1`, adm.OID)
	require.NoError(t, err)
	deps, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"a pg_database " + p.targetDB}, deps, "owns nothing; one ACL entry: the target database")
	var connect, create, temp, schemaCreate, schemaOwner bool
	require.NoError(t, p.superDB.QueryRow(ctx, `
SELECT has_database_privilege($1, current_database(), 'CONNECT'), has_database_privilege($1, current_database(), 'CREATE'),
       has_database_privilege($1, current_database(), 'TEMP'), has_schema_privilege($1, 'public', 'CREATE'),
       pg_has_role($1, (SELECT nspowner FROM pg_namespace WHERE nspname = 'public'), 'USAGE')`, p.adminUser).
		Scan(&connect, &create, &temp, &schemaCreate, &schemaOwner))
	require.True(t, connect, "CONNECT on the maintenance database")
	require.False(t, create, "no CREATE on the database")
	require.False(t, temp, "no TEMP on the database")
	require.False(t, schemaCreate, "no CREATE on schema public")
	require.False(t, schemaOwner, "not the owner of schema public, nor a member of it")
}

// checkHBA asserts that every pg_hba.conf line demands scram-sha-256 (no trust, no md5), so the
// logins below really authenticate with the passwords roleset handed out.
func (p *privEnv) checkHBA(t *testing.T) {
	rows, err := p.super.Query(context.Background(), `SELECT line_number, type, auth_method, coalesce(error, '') FROM pg_hba_file_rules`)
	require.NoError(t, err)
	type rule struct {
		Line              int
		Type, Method, Err string
	}
	rules, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rule])
	require.NoError(t, err)
	require.NotEmpty(t, rules)
	for _, r := range rules {
		require.Empty(t, r.Err, "pg_hba.conf line %d", r.Line)
		require.Equal(t, "scram-sha-256", r.Method, "pg_hba.conf line %d (%s)", r.Line, r.Type)
	}
	require.Error(t, p.canLogin(p.adminUser, "wrong-"+p.adminPass), "a wrong password is refused")
	require.NoError(t, p.canLogin(p.adminUser, p.adminPass))
}

// createRoles creates two catalog roles through the API and, as the data table's owner, the
// RLS-protected table, grants and the data table with its permissions: alice is in group pa
// (role a), bob in pb (role b), carol in both (a wm_set_ login).
func (p *privEnv) createRoles(t *testing.T) {
	ctx := context.Background()
	sfx := randHex(3)
	p.a = p.createRole(p.r, "pa_"+sfx)
	p.b = p.createRole(p.r, "pb_"+sfx)
	for _, r := range []*rolesetv1.Role{p.a, p.b} {
		got := p.role(t, r.GetName())
		require.True(t, got.Exists)
		require.EqualValues(t, r.GetOid(), got.OID)
		require.True(t, got.Login, "a catalog role can log in")
		require.True(t, got.Scram)
		require.False(t, got.Super || got.CreateRole || got.CreateDB || got.Replication || got.BypassRLS)
		require.Equal(t, []string{p.adminUser}, got.Members, "granted to the admin (GRANT r TO CURRENT_USER), and to nobody else")
		require.True(t, strings.HasPrefix(got.Comment, "millwright roleset "+p.instance+" role "), got.Comment)
		var usage bool
		require.NoError(t, p.super.QueryRow(ctx, `SELECT pg_has_role($1, $2::oid, 'USAGE')`, p.adminUser, r.GetOid()).Scan(&usage))
		require.True(t, usage, "the admin has the privileges of the role it created (INHERIT)")
	}
	adm := p.role(t, p.adminUser)
	want := []string{p.a.GetName(), p.b.GetName()}
	if p.signal {
		want = append(want, "pg_signal_backend")
	}
	require.ElementsMatch(t, want, adm.MemberOf, "the admin gained exactly the roles it created")

	superExec(t, p.superDSN, fmt.Sprintf(`GRANT %s TO "%s", "%s"`, p.connect, p.a.GetName(), p.b.GetName()))
	superExec(t, p.superTarget(),
		`SET ROLE `+p.owner,
		`CREATE TABLE orders (id int PRIMARY KEY, region text NOT NULL)`,
		`INSERT INTO orders VALUES (1, 'a'), (2, 'a'), (3, 'b'), (4, 'b'), (5, 'c')`,
		`ALTER TABLE orders ENABLE ROW LEVEL SECURITY`,
		fmt.Sprintf(`GRANT SELECT ON orders TO "%s", "%s"`, p.a.GetName(), p.b.GetName()),
		// By oid, so a rename keeps the policy.
		fmt.Sprintf(`CREATE POLICY p_a ON orders FOR SELECT USING (region = 'a' AND (SELECT pg_has_role(current_user, %d::oid, 'member')))`, p.a.GetOid()),
		fmt.Sprintf(`CREATE POLICY p_b ON orders FOR SELECT USING (region = 'b' AND (SELECT pg_has_role(current_user, %d::oid, 'member')))`, p.b.GetOid()),
		`RESET ROLE`)
	_, err := p.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: "main",
		ClusterId: p.clusterID, Database: p.targetDB, AdminUser: p.owner, AdminPassword: "unused-" + randHex(8), DefaultRole: "$none",
		ViewerAccess: proto.Bool(true), CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT})
	require.NoError(t, err)
	_, err = p.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "ws", Name: "main",
		DefaultRole: "$none", Roles: map[string]*rolesetv1.Tenants{
			p.a.GetRoleId(): {Tenants: []string{"g/pa"}},
			p.b.GetRoleId(): {Tenants: []string{"g/pb"}},
		}})
	require.NoError(t, err)
	p.policy.setMember(member{Email: "alice@x", Username: "alice", Groups: []string{"pa"}})
	p.policy.setMember(member{Email: "bob@x", Username: "bob", Groups: []string{"pb"}})
	p.policy.setMember(member{Email: "carol@x", Username: "carol", Groups: []string{"pa", "pb"}})
}

// resolveViewer resolves as=viewer for a fresh run of viewer and checks the login and what it
// sees, logging in with the returned password.
func (p *privEnv) resolveViewer(t *testing.T, viewer string, kind rolesetv1.ConnectionKind, user string, rows []int) *rolesetv1.ResolveConnectionResponse {
	t.Helper()
	c, err := p.resolve(p.r, p.viewerRun(viewer), "datatable://main?as=viewer")
	require.NoError(t, err)
	require.Equal(t, kind, c.GetKind())
	if strings.HasSuffix(user, "*") {
		require.True(t, strings.HasPrefix(c.GetUser(), strings.TrimSuffix(user, "*")), c.GetUser())
	} else {
		require.Equal(t, user, c.GetUser())
	}
	got, err := query(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, rows, got)
	require.Error(t, p.canLogin(c.GetUser(), c.GetPassword()+"x"), "a wrong password is refused")
	return c
}

func (p *privEnv) setLoginRow(t testing.TB, login string) (row, journal bool) {
	t.Helper()
	require.NoError(t, p.r.pool.QueryRow(context.Background(), `SELECT
  EXISTS (SELECT FROM datatable_role_set WHERE login = $1), EXISTS (SELECT FROM datatable_role_set_retiring WHERE login = $1)`, login).Scan(&row, &journal))
	return row, journal
}

func (p *privEnv) enable(t *testing.T, r *rolesetv1.Role, on bool) error {
	_, err := p.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: r.GetRoleId(), Enabled: new(on)})
	return err
}

// TestRunbookPrivileges proves docs/operations.md "roleset: the admin login on each target
// cluster": roleset runs against a non-superuser admin holding exactly the table's rows
// (LOGIN with a SCRAM password, CREATEROLE, pg_signal_backend, INHERIT, CONNECT on the
// maintenance database; no ownership of any database or schema) through create, resolve,
// rename, disable (retire with sessions open), enable and the sweep; shows that delete needs
// the table's last row (the privileges of whoever granted to the role); and, without
// pg_signal_backend, shows exactly how a retire of a login with an open session fails.
func TestRunbookPrivileges(t *testing.T) {
	ctx := context.Background()

	t.Run("with exactly the runbook's privileges", func(t *testing.T) {
		p := newPrivEnv(t, true)
		t.Run("the admin holds exactly the listed privileges", p.checkAdmin)
		t.Run("pg_hba demands scram-sha-256", p.checkHBA)
		t.Run("create two roles", p.createRoles)

		var own, set *rolesetv1.ResolveConnectionResponse
		t.Run("resolve a viewer of one role: its own login", func(t *testing.T) {
			own = p.resolveViewer(t, "alice@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, p.a.GetName(), []int{1, 2})
			p.resolveViewer(t, "bob@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, p.b.GetName(), []int{3, 4})
		})
		t.Run("resolve a viewer of both: a wm_set_ login", func(t *testing.T) {
			set = p.resolveViewer(t, "carol@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, "wm_set_*", []int{1, 2, 3, 4})
			got := p.role(t, set.GetUser())
			require.True(t, got.Login)
			require.True(t, got.Scram)
			require.False(t, got.Super || got.CreateRole || got.CreateDB || got.Replication || got.BypassRLS)
			require.ElementsMatch(t, []string{p.a.GetName(), p.b.GetName()}, got.MemberOf)
			require.Empty(t, got.Members)
		})
		t.Run("rename keeps the login and its password", func(t *testing.T) {
			name := "pb_renamed_" + randHex(3)
			_, err := p.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: p.b.GetRoleId(), Name: new(name)})
			require.NoError(t, err)
			oid := p.b.GetOid()
			p.b.Name = name
			require.EqualValues(t, oid, p.role(t, name).OID)
			p.resolveViewer(t, "bob@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, name, []int{3, 4})
			require.NoError(t, p.canLogin(set.GetUser(), set.GetPassword()), "the set login is untouched")
		})
		t.Run("disable: the set login is retired and the open sessions are terminated", func(t *testing.T) {
			require.NotNil(t, set)
			ownSess, setSess := privSession(t, own), privSession(t, set)
			ownOID, setOID := p.role(t, own.GetUser()).OID, p.role(t, set.GetUser()).OID
			require.Equal(t, 1, p.backends(t, ownOID))
			require.Equal(t, 1, p.backends(t, setOID))

			require.NoError(t, p.enable(t, p.a, false))

			row, journal := p.setLoginRow(t, set.GetUser())
			require.False(t, row, "the set login's row is gone")
			require.False(t, journal, "the retire finished")
			got := p.role(t, set.GetUser())
			require.True(t, !got.Exists || !got.Login, "the set login is dropped or NOLOGIN")
			require.False(t, got.Exists, "dropped (nothing blocked DROP ROLE)")
			_, err := setSess.Exec(ctx, `SELECT 1`)
			require.Error(t, err, "the set login's open session was terminated (pg_terminate_backend)")
			require.Zero(t, p.backends(t, setOID))
			require.Error(t, p.canLogin(set.GetUser(), set.GetPassword()))

			require.False(t, p.role(t, own.GetUser()).Login, "the role's own login is NOLOGIN")
			_, err = ownSess.Exec(ctx, `SELECT 1`)
			require.Error(t, err, "the own login's open session was terminated")
			require.Zero(t, p.backends(t, ownOID))
			err = p.canLogin(own.GetUser(), own.GetPassword())
			require.Error(t, err)
			require.Contains(t, err.Error(), "not permitted to log in")

			// carol now has only b: never the disabled role, never a fallback to it.
			p.resolveViewer(t, "carol@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, p.b.GetName(), []int{3, 4})
		})
		t.Run("enable, then the sweep drops a stale set login", func(t *testing.T) {
			require.NoError(t, p.enable(t, p.a, true))
			require.True(t, p.role(t, p.a.GetName()).Login, "ALTER ROLE ... LOGIN")
			again := p.resolveViewer(t, "carol@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, "wm_set_*", []int{1, 2, 3, 4})
			require.Equal(t, set.GetUser(), again.GetUser(), "the same oids, the same name")
			require.NotEqual(t, set.GetPassword(), again.GetPassword(), "re-made with a new password")
			sess := privSession(t, again)
			oid := p.role(t, again.GetUser()).OID
			require.Equal(t, 1, p.backends(t, oid))

			tag, err := p.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '31 days' WHERE login = $1`, again.GetUser())
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())
			res, err := p.r.roles().Sweep(adminCtx(), &rolesetv1.SweepRequest{})
			require.NoError(t, err)
			require.EqualValues(t, 1, res.GetDropped())

			p.checkRetired(t, again.GetUser(), sess, oid)
		})
		t.Run("PG16+: a member role without ADMIN OPTION is refused, with it accepted", func(t *testing.T) {
			if p.version < 160000 {
				t.Skipf("server_version_num %d: before PostgreSQL 16 CREATEROLE may grant any non-superuser role "+
					"without ADMIN OPTION (postgres-roles.md §5), so there is no refusal to show", p.version)
			}
			// Another login with the same rows, registered in place of the one that created a and b:
			// on PG16 it has no ADMIN OPTION on them, so it cannot make a set login holding them.
			admin2, pass2 := "rsadm2_"+randHex(4), randHex(16)
			superExec(t, p.superDSN,
				fmt.Sprintf(`CREATE ROLE %s LOGIN CREATEROLE PASSWORD '%s'`, admin2, pass2),
				`GRANT pg_signal_backend TO `+admin2,
				`GRANT CONNECT ON DATABASE "`+p.targetDB+`" TO `+admin2)
			t.Cleanup(func() {
				_ = privWithConn(p.superDSN, func(c *pgx.Conn) error {
					_, _ = c.Exec(ctx, `DROP OWNED BY `+admin2)
					_, err := c.Exec(ctx, `DROP ROLE IF EXISTS `+admin2)
					return err
				})
			})
			_, err := rolesetv1.NewClusterServiceClient(p.r.cc).UpsertCluster(adminCtx(), &rolesetv1.UpsertClusterRequest{
				ClusterId: p.clusterID, Host: p.host, Port: int32(p.port), MaintenanceDatabase: p.targetDB,
				AdminUser: admin2, AdminPassword: pass2})
			require.NoError(t, err)
			p.r.eng.DropCaches()
			_, err = p.resolve(p.r, p.viewerRun("carol@x"), "datatable://main?as=viewer")
			require.Error(t, err, "CREATE ROLE wm_set_... IN ROLE a, b needs ADMIN OPTION on a and b")
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)

			superExec(t, p.superDSN, fmt.Sprintf(`GRANT "%s", "%s" TO %s WITH ADMIN OPTION`, p.a.GetName(), p.b.GetName(), admin2))
			made := p.resolveViewer(t, "carol@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, "wm_set_*", []int{1, 2, 3, 4})
			// Drop it while admin2 (its creator, hence holder of ADMIN OPTION on it) is registered,
			// then go back to the first admin for the cases below.
			_, err = p.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '31 days' WHERE login = $1`, made.GetUser())
			require.NoError(t, err)
			res, err := p.r.roles().Sweep(adminCtx(), &rolesetv1.SweepRequest{})
			require.NoError(t, err)
			require.EqualValues(t, 1, res.GetDropped())
			p.registerCluster(p.r)
		})
		t.Run("delete: DROP OWNED needs the privileges of whoever granted to the role", func(t *testing.T) {
			a := p.a.GetName()
			// a owns a table, and holds SELECT on orders granted by the tables' owner.
			superExec(t, p.superTarget(), `CREATE TABLE owned_by_a (x int)`, `ALTER TABLE owned_by_a OWNER TO "`+a+`"`)
			state := func() string {
				var s string
				require.NoError(t, p.r.pool.QueryRow(ctx, `SELECT coalesce((SELECT state::text FROM datatable_role WHERE id = $1::bigint), 'gone')`,
					p.a.GetRoleId()).Scan(&s))
				return s
			}
			tableOwner := func() string {
				var s string
				require.NoError(t, p.superDB.QueryRow(ctx, `SELECT relowner::regrole::text FROM pg_class WHERE relname = 'owned_by_a'`).Scan(&s))
				return s
			}

			_, err := p.r.roles().DeleteRole(adminCtx(), &rolesetv1.DeleteRoleRequest{RoleId: p.a.GetRoleId()})
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)
			require.Equal(t, p.adminUser, tableOwner(), "REASSIGN OWNED BY a TO CURRENT_USER worked (the admin holds a)")
			var granted bool
			require.NoError(t, p.superDB.QueryRow(ctx, `SELECT has_table_privilege($1, 'orders', 'SELECT')`, a).Scan(&granted))
			require.True(t, granted, "DROP OWNED could not revoke the owner's grant: a non-superuser revokes only its own grants")
			got := p.role(t, a)
			require.True(t, got.Exists, "DROP ROLE failed")
			require.False(t, got.Login, "NOLOGIN")
			require.Equal(t, "deleting", state(), "left for the reconciler")
			_, err = p.r.eng.Sweep(ctx)
			require.Equal(t, "2BP01", privSQLState(err), "each sweep retries and fails: %v", err)

			// What the runbook asks for: the admin holds the grantor's privileges.
			superExec(t, p.superDSN, `GRANT `+p.owner+` TO `+p.adminUser)
			_, err = p.r.eng.Sweep(ctx)
			require.NoError(t, err, "the reconciler finishes the delete")
			require.False(t, p.role(t, a).Exists, "dropped")
			require.Equal(t, "gone", state())
			require.Equal(t, p.adminUser, tableOwner())
		})
	})

	t.Run("without pg_signal_backend", func(t *testing.T) {
		parent := t
		p := newPrivEnv(t, false)
		t.Run("the admin holds the listed privileges but pg_signal_backend", p.checkAdmin)
		t.Run("create two roles", p.createRoles)

		t.Run("the sweep still drops a stale set login that has no session", func(t *testing.T) {
			set := p.resolveViewer(t, "carol@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, "wm_set_*", []int{1, 2, 3, 4})
			_, err := p.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '31 days' WHERE login = $1`, set.GetUser())
			require.NoError(t, err)
			res, err := p.r.roles().Sweep(adminCtx(), &rolesetv1.SweepRequest{})
			require.NoError(t, err, "pg_terminate_backend of no session needs no privilege")
			require.EqualValues(t, 1, res.GetDropped())
			require.False(t, p.role(t, set.GetUser()).Exists)
		})

		// Opened on the parent test, so they outlive the subtests.
		var set *rolesetv1.ResolveConnectionResponse
		var setSess *pgx.Conn
		var setOID int64
		t.Run("disable with sessions open", func(t *testing.T) {
			own := p.resolveViewer(t, "alice@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, p.a.GetName(), []int{1, 2})
			set = p.resolveViewer(t, "carol@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, "wm_set_*", []int{1, 2, 3, 4})
			ownSess := privSession(t, own)
			setSess = privSession(parent, set)
			setOID = p.role(t, set.GetUser()).OID

			err := p.enable(t, p.a, false)
			require.Error(t, err, "the retire of the set login fails")
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)

			roles, err := p.r.roles().ListRoles(adminCtx(), &rolesetv1.ListRolesRequest{ClusterId: p.clusterID})
			require.NoError(t, err)
			found := false
			for _, r := range roles.GetRoles() {
				if r.GetRoleId() == p.a.GetRoleId() {
					found = true
					require.False(t, r.GetEnabled(), "the catalog change stands")
				}
			}
			require.True(t, found)
			// The role's own login: NOLOGIN and its session ended anyway, because the admin holds
			// every catalog role it created (GRANT r TO CURRENT_USER, INHERIT), which is enough
			// for pg_terminate_backend of that role's own sessions.
			require.False(t, p.role(t, own.GetUser()).Login, "the own login is NOLOGIN")
			_, err = ownSess.Exec(ctx, `SELECT 1`)
			require.Error(t, err, "the own login's session was terminated without pg_signal_backend")

			// The set login: out of the catalog, NOLOGIN, not dropped, its session still working.
			p.checkStuck(t, set, setSess, setOID)
			// carol is handed b's own login now, never the stuck one.
			p.resolveViewer(t, "carol@x", rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, p.b.GetName(), []int{3, 4})
		})

		t.Run("each sweep retries, fails and logs; granting pg_signal_backend lets it finish", func(t *testing.T) {
			require.NotNil(t, setSess)
			res, err := p.r.eng.Sweep(ctx)
			require.Error(t, err)
			require.Zero(t, res.Resumed)
			require.Equal(t, "42501", privSQLState(err), "%v", err)
			if p.version < 160000 {
				require.Contains(t, err.Error(), noSignalMsgPG15, "the message the runbook quotes")
			} else {
				require.Contains(t, err.Error(), noSignalMsgPG16)
			}
			_, err = p.r.roles().Sweep(adminCtx(), &rolesetv1.SweepRequest{})
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)

			// The monitor loop (every replica, every sweep interval) logs it as a warning and
			// counts a failed sweep.
			var buf servicetest.LogBuffer
			var counts app.SweepCounts
			mctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- app.Monitor(mctx, p.r.eng, time.Hour, slog.New(slog.NewJSONHandler(&buf, nil)), &counts)
			}()
			require.Eventually(t, func() bool { return strings.Contains(buf.String(), `"msg":"roleset: sweep"`) }, 10*time.Second, 10*time.Millisecond)
			cancel()
			require.NoError(t, <-done)
			require.Contains(t, buf.String(), `"level":"WARN"`)
			require.Contains(t, buf.String(), "SQLSTATE 42501")
			require.EqualValues(t, 1, counts.Failed.Load())
			require.Zero(t, counts.Resumed.Load())
			p.checkStuck(t, set, setSess, setOID)

			// The remedy the runbook gives: grant it; the next sweep finishes the retire.
			superExec(t, p.superDSN, `GRANT pg_signal_backend TO `+p.adminUser)
			res, err = p.r.eng.Sweep(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, res.Resumed)
			p.checkRetired(t, set.GetUser(), setSess, setOID)
		})
	})
}

// checkRetired asserts the state a finished retire leaves: the login dropped, its row and
// journal entry gone, and its open session sess terminated.
func (p *privEnv) checkRetired(t *testing.T, login string, sess *pgx.Conn, oid int64) {
	t.Helper()
	require.False(t, p.role(t, login).Exists, "DROP ROLE")
	row, journal := p.setLoginRow(t, login)
	require.False(t, row)
	require.False(t, journal)
	_, err := sess.Exec(context.Background(), `SELECT 1`)
	require.Error(t, err, "the login's open session was terminated")
	require.Zero(t, p.backends(t, oid))
}

// checkStuck asserts the state a retire leaves when pg_terminate_backend is refused.
func (p *privEnv) checkStuck(t *testing.T, set *rolesetv1.ResolveConnectionResponse, sess *pgx.Conn, oid int64) {
	t.Helper()
	row, journal := p.setLoginRow(t, set.GetUser())
	require.False(t, row, "no replica hands the login out any more")
	require.True(t, journal, "the retire journal keeps it for the sweep")
	got := p.role(t, set.GetUser())
	require.True(t, got.Exists, "not dropped")
	require.False(t, got.Login, "NOLOGIN")
	require.Error(t, p.canLogin(set.GetUser(), set.GetPassword()), "no new session")
	require.Equal(t, 1, p.backends(t, oid), "the open session was not terminated")
	rows, err := privVisible(sess)
	require.NoError(t, err, "and it keeps working")
	require.Equal(t, []int{1, 2, 3, 4}, rows, "with both roles' rows")
}
