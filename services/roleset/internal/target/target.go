package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

// Cluster is a connection to one target cluster as its admin login (CREATEROLE,
// pg_signal_backend; no superuser).
type Cluster struct {
	pool                     *pgxpool.Pool
	host                     string
	port                     int
	user, password, database string
}

// Config says how to reach a cluster.
type Config struct {
	Host, User, Password, Database string
	Port                           int
	MaxConns                       int32
}

func dsn(host string, port int, user, password, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password),
		Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/" + db}
	q := url.Values{}
	q.Set("sslmode", "prefer")
	q.Set("application_name", "millwright-roleset")
	u.RawQuery = q.Encode()
	return u.String()
}

// Open connects (lazily: the pool dials on first use).
func Open(ctx context.Context, c Config) (*Cluster, error) {
	cfg, err := pgxpool.ParseConfig(dsn(c.Host, c.Port, c.User, c.Password, c.Database))
	if err != nil {
		return nil, fmt.Errorf("target: config: %w", err)
	}
	if c.MaxConns > 0 {
		cfg.MaxConns = c.MaxConns
	}
	cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Cluster{pool: pool, host: c.Host, port: c.Port, user: c.User, password: c.Password, database: c.Database}, nil
}

// Close closes the pool.
func (c *Cluster) Close() { c.pool.Close() }

var setLoginRe = regexp.MustCompile(`^` + rolename.SetLoginPrefix + `[0-9a-z]{8,56}$`)

// CheckSetLoginName refuses anything but a name this service builds, before it reaches SQL.
func CheckSetLoginName(login string) error {
	if !setLoginRe.MatchString(login) {
		return fmt.Errorf("target: %q is not a set-login name", rolename.SafeInput(login))
	}
	return nil
}

func checkRoleName(name string) error {
	if err := rolename.Validate(name); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	return nil
}

var verifierRe = regexp.MustCompile(`^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$`)

func checkVerifier(v string) error {
	if !verifierRe.MatchString(v) {
		return errors.New("target: not a SCRAM verifier") // never echo it
	}
	return nil
}

func q(name string) string { return rolename.QuoteIdent(name) }
func lit(s string) string  { return rolename.QuoteLiteral(s) }
func roleLock(oid int64) string {
	return fmt.Sprintf("SELECT pg_advisory_xact_lock(hashtextextended('millwright.roleset.role:%d', 0));\n", oid)
}

// Member is a member role of a set login: its current name and its oid.
type Member struct {
	Name string
	OID  int64
}

// LoginInfo is what the cluster says about a role name.
type LoginInfo struct {
	Exists     bool
	OID        int64
	CanLogin   bool
	Privileged bool     // superuser, createrole, createdb, replication or bypassrls
	HasDeps    bool     // owns objects or holds direct grants (pg_shdepend, every database)
	MemberOf   []Member // roles it is a member of
	Members    []string // roles that are members of it, the admin login itself left out (see checkBlock)
}

// Lookup reads a role by name.
func (c *Cluster) Lookup(ctx context.Context, name string) (LoginInfo, error) {
	var li LoginInfo
	err := c.pool.QueryRow(ctx, `
SELECT r.oid::bigint, r.rolcanlogin,
       r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls,
       EXISTS (SELECT FROM pg_shdepend s WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = r.oid AND s.deptype IN ('o', 'a', 'i')),
       coalesce((SELECT array_agg(DISTINCT g.rolname::text) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.member
                 WHERE m.roleid = r.oid AND g.rolname <> current_user), '{}')
FROM pg_roles r WHERE r.rolname = $1`, name).Scan(&li.OID, &li.CanLogin, &li.Privileged, &li.HasDeps, &li.Members)
	if errors.Is(err, pgx.ErrNoRows) {
		return li, nil
	}
	if err != nil {
		return li, err
	}
	li.Exists = true
	// The roles it is a member of, names with oids.
	rows, err := c.pool.Query(ctx, `SELECT DISTINCT g.rolname::text, g.oid::bigint FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = $1 ORDER BY 2`, li.OID)
	if err != nil {
		return li, err
	}
	li.MemberOf, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
		var m Member
		err := r.Scan(&m.Name, &m.OID)
		return m, err
	})
	return li, err
}

// checkBlock builds a DO block that aborts the implicit transaction unless login is a LOGIN
// role whose memberships are exactly oids, that nobody is a member of, and that may connect to
// database: what "can authenticate, with exactly these roles" means on the cluster side. The
// password half is ours: the verifier just set is the one built from the stored password.
//
// "Nobody" leaves out the admin login this service runs as: on PG16 and later a CREATEROLE
// role that creates a role is granted it automatically (with ADMIN OPTION, which it needs to
// manage it), and the admin is already a member of every role the login holds.
func checkBlock(login string, oids []int64, database string) string {
	arr := make([]string, len(oids))
	for i, o := range oids {
		arr[i] = strconv.FormatInt(o, 10)
	}
	return fmt.Sprintf(`DO $mw$ DECLARE l oid; BEGIN
  SELECT oid INTO l FROM pg_roles WHERE rolname = %[1]s AND rolcanlogin;
  IF l IS NULL THEN RAISE EXCEPTION 'millwright: login missing or NOLOGIN'; END IF;
  IF (SELECT array_agg(DISTINCT roleid::bigint ORDER BY roleid::bigint) FROM pg_auth_members WHERE member = l)
     IS DISTINCT FROM '{%[2]s}'::bigint[] THEN RAISE EXCEPTION 'millwright: membership mismatch'; END IF;
  IF EXISTS (SELECT FROM pg_auth_members WHERE roleid = l AND member <> (SELECT oid FROM pg_roles WHERE rolname = current_user))
     THEN RAISE EXCEPTION 'millwright: login has members'; END IF;
  IF NOT has_database_privilege(l, %[3]s, 'CONNECT') THEN RAISE EXCEPTION 'millwright: no CONNECT'; END IF;
END $mw$;
`, lit(login), strings.Join(arr, ","), lit(database))
}

func sortedMembers(ms []Member) []Member {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b Member) int { return int(a.OID - b.OID) })
	return ms
}

func oidsOf(ms []Member) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.OID
	}
	return out
}

// CreateSetLogin creates login as a LOGIN, INHERIT member of exactly members, with the
// verifier, in one implicit transaction that takes each member role's lock (the orphan
// membership race: DropRole takes it too) and verifies the result before committing. It
// fails with 42710 if the login exists.
func (c *Cluster) CreateSetLogin(ctx context.Context, login, verifier string, members []Member, database string) error {
	if err := CheckSetLoginName(login); err != nil {
		return err
	}
	if err := checkVerifier(verifier); err != nil {
		return err
	}
	members = sortedMembers(members)
	var b strings.Builder
	names := make([]string, len(members))
	for i, m := range members {
		if err := checkRoleName(m.Name); err != nil {
			return err
		}
		b.WriteString(roleLock(m.OID))
		names[i] = q(m.Name)
	}
	// INHERIT: privileges come through membership, so SET ROLE only narrows. On PG16 the
	// grant's inherit option defaults from the member's INHERIT attribute, so the same
	// statement gives inheriting grants there too (postgres-roles.md §5).
	fmt.Fprintf(&b, "CREATE ROLE %s LOGIN INHERIT CONNECTION LIMIT -1 VALID UNTIL 'infinity' PASSWORD %s IN ROLE %s;\n",
		q(login), lit(verifier), strings.Join(names, ", "))
	b.WriteString(checkBlock(login, oidsOf(members), database))
	_, err := c.pool.Exec(ctx, b.String())
	return err
}

// ErrForeignLogin is a login found under our name that this service cannot safely take over
// (privileged attributes, owned objects or direct grants).
var ErrForeignLogin = errors.New("target: existing login is not safe to take back")

// TakeBackSetLogin re-keys an existing login that has no row: new verifier, LOGIN, memberships
// reset to exactly members, members of it revoked; verified in the same transaction. Then its
// sessions are ended: whoever held the old password is cut off.
func (c *Cluster) TakeBackSetLogin(ctx context.Context, login, verifier string, members []Member, database string, li LoginInfo) error {
	if err := CheckSetLoginName(login); err != nil {
		return err
	}
	if err := checkVerifier(verifier); err != nil {
		return err
	}
	if li.Privileged || li.HasDeps {
		return ErrForeignLogin
	}
	members = sortedMembers(members)
	want := map[int64]bool{}
	var b strings.Builder
	for _, m := range members {
		if err := checkRoleName(m.Name); err != nil {
			return err
		}
		want[m.OID] = true
		b.WriteString(roleLock(m.OID))
	}
	fmt.Fprintf(&b, "ALTER ROLE %s LOGIN INHERIT CONNECTION LIMIT -1 VALID UNTIL 'infinity' PASSWORD %s;\n", q(login), lit(verifier))
	have := map[int64]bool{}
	for _, m := range li.MemberOf {
		have[m.OID] = true
		if !want[m.OID] {
			fmt.Fprintf(&b, "REVOKE %s FROM %s;\n", q(m.Name), q(login))
		}
	}
	for _, m := range members {
		if !have[m.OID] {
			fmt.Fprintf(&b, "GRANT %s TO %s;\n", q(m.Name), q(login))
		}
	}
	for _, m := range li.Members {
		fmt.Fprintf(&b, "REVOKE %s FROM %s;\n", q(login), q(m))
	}
	b.WriteString(checkBlock(login, oidsOf(members), database))
	if _, err := c.pool.Exec(ctx, b.String()); err != nil {
		return err
	}
	return c.Terminate(ctx, login)
}

// Terminate ends every session of the role, twice (a login can be mid-authentication during
// the first pass), waiting for each backend to exit so its temp objects are gone. NOLOGIN and
// DROP ROLE leave open sessions working, so every retire calls this.
func (c *Cluster) Terminate(ctx context.Context, role string) error {
	for i := 0; i < 2; i++ {
		if _, err := c.pool.Exec(ctx, `
SELECT pg_terminate_backend(a.pid, 5000) FROM pg_stat_activity a
WHERE a.usesysid = (SELECT oid FROM pg_roles WHERE rolname = $1) AND a.pid <> pg_backend_pid()`, role); err != nil {
			return err
		}
		if i == 0 {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// RetireSetLogin makes login NOLOGIN, ends its sessions and drops it. Every step is idempotent,
// so an interrupted retire is finished by running it again. A login that cannot be dropped
// (it came to own something) stays NOLOGIN and the error is returned.
func (c *Cluster) RetireSetLogin(ctx context.Context, login string) error {
	if err := CheckSetLoginName(login); err != nil {
		return err
	}
	if _, err := c.pool.Exec(ctx, fmt.Sprintf(`DO $mw$ BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = %s) THEN EXECUTE %s; END IF; END $mw$`,
		lit(login), lit("ALTER ROLE "+q(login)+" NOLOGIN"))); err != nil {
		return err
	}
	if err := c.Terminate(ctx, login); err != nil {
		return err
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if _, err = c.pool.Exec(ctx, "DROP ROLE IF EXISTS "+q(login)); err == nil {
			return nil
		}
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "2BP01" { // dependent objects: a late backend's temp table
			return err
		}
		if err := c.Terminate(ctx, login); err != nil {
			return err
		}
	}
	return err
}

// ---- catalog roles ----

// Marker is the comment this service puts on each role it creates, so an interrupted creation
// can be recognized as ours and never confused with a role someone else made.
func Marker(instanceID string, roleID int64) string {
	return fmt.Sprintf("millwright roleset %s role %d", instanceID, roleID)
}

// ErrRoleExists is a role name already taken on the cluster by a role that is not ours.
var ErrRoleExists = errors.New("target: role exists")

// CreateRole creates a catalog role: LOGIN with the verifier, marked with marker, granted to
// the admin (so a later delete can REASSIGN/DROP OWNED). If a role of that name exists with our
// marker (an interrupted creation) it is taken back with the new verifier; any other existing
// role is ErrRoleExists. It returns the oid.
func (c *Cluster) CreateRole(ctx context.Context, name, verifier, marker string) (int64, error) {
	if err := checkRoleName(name); err != nil {
		return 0, err
	}
	if err := checkVerifier(verifier); err != nil {
		return 0, err
	}
	var oid int64
	var comment *string
	err := c.pool.QueryRow(ctx, `SELECT oid::bigint, shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1`, name).Scan(&oid, &comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		sql := fmt.Sprintf("CREATE ROLE %[1]s LOGIN INHERIT VALID UNTIL 'infinity' PASSWORD %[2]s;\nCOMMENT ON ROLE %[1]s IS %[3]s;\nGRANT %[1]s TO CURRENT_USER;\n",
			q(name), lit(verifier), lit(marker))
		if _, err := c.pool.Exec(ctx, sql); err != nil {
			var pg *pgconn.PgError
			if errors.As(err, &pg) && (pg.Code == "42710" || pg.Code == "23505") {
				return 0, ErrRoleExists
			}
			return 0, err
		}
		err = c.pool.QueryRow(ctx, `SELECT oid::bigint FROM pg_roles WHERE rolname = $1`, name).Scan(&oid)
		return oid, err
	case err != nil:
		return 0, err
	case comment == nil || *comment != marker:
		return 0, ErrRoleExists
	}
	_, err = c.pool.Exec(ctx, fmt.Sprintf("ALTER ROLE %s LOGIN VALID UNTIL 'infinity' PASSWORD %s", q(name), lit(verifier)))
	return oid, err
}

// RoleName returns the current name of the role with oid, if it exists and carries marker.
func (c *Cluster) RoleName(ctx context.Context, oid int64, marker string) (string, bool, error) {
	var name string
	var comment *string
	err := c.pool.QueryRow(ctx, `SELECT rolname::text, shobj_description(oid, 'pg_authid') FROM pg_roles WHERE oid = $1`, oid).Scan(&name, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return name, comment != nil && *comment == marker, nil
}

// CanLogin reports the role's rolcanlogin (false if it does not exist).
func (c *Cluster) CanLogin(ctx context.Context, oid int64) (bool, error) {
	var ok bool
	err := c.pool.QueryRow(ctx, `SELECT rolcanlogin FROM pg_roles WHERE oid = $1`, oid).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return ok, err
}

// SetRoleLogin sets LOGIN or NOLOGIN on a catalog role; NOLOGIN also ends its sessions.
func (c *Cluster) SetRoleLogin(ctx context.Context, name string, login bool) error {
	if err := checkRoleName(name); err != nil {
		return err
	}
	attr := "NOLOGIN"
	if login {
		attr = "LOGIN"
	}
	if _, err := c.pool.Exec(ctx, "ALTER ROLE "+q(name)+" "+attr); err != nil {
		return err
	}
	if !login {
		return c.Terminate(ctx, name)
	}
	return nil
}

// RenameRole renames a catalog role (its SCRAM verifier and oid survive a rename).
func (c *Cluster) RenameRole(ctx context.Context, from, to string) error {
	if err := checkRoleName(from); err != nil {
		return err
	}
	if err := checkRoleName(to); err != nil {
		return err
	}
	_, err := c.pool.Exec(ctx, "ALTER ROLE "+q(from)+" RENAME TO "+q(to))
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42710" {
		return ErrRoleExists
	}
	return err
}

// DropRole drops the catalog role with oid (if it still exists and carries marker): its
// sessions are ended, in every database where it owns objects or holds privileges they are
// reassigned to the admin and its privileges dropped, then the role is dropped under its lock.
func (c *Cluster) DropRole(ctx context.Context, oid int64, marker string) error {
	name, ours, err := c.RoleName(ctx, oid, marker)
	if err != nil || name == "" {
		return err
	}
	if !ours {
		return ErrRoleExists // not ours any more: never drop it
	}
	if err := checkRoleName(name); err != nil {
		return err
	}
	if _, err := c.pool.Exec(ctx, "ALTER ROLE "+q(name)+" NOLOGIN"); err != nil {
		return err
	}
	if err := c.Terminate(ctx, name); err != nil {
		return err
	}
	rows, err := c.pool.Query(ctx, `SELECT DISTINCT d.datname::text FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid
WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = $1 ORDER BY 1`, oid)
	if err != nil {
		return err
	}
	dbs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, db := range dbs {
		conn, err := pgx.Connect(ctx, dsn(c.host, c.port, c.user, c.password, db))
		if err != nil {
			return fmt.Errorf("target: connect to database %q: %w", rolename.SafeInput(db), err)
		}
		_, err = conn.Exec(ctx, "REASSIGN OWNED BY "+q(name)+" TO CURRENT_USER;\nDROP OWNED BY "+q(name)+";")
		_ = conn.Close(ctx)
		if err != nil {
			return err
		}
	}
	_, err = c.pool.Exec(ctx, roleLock(oid)+"DROP ROLE IF EXISTS "+q(name)+";")
	return err
}
