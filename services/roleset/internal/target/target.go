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

	"github.com/millwright/millwright/pkg/failpoint"
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

// roleLock is the statement that takes the lock of the role with oid until the end of the
// transaction. Every change of a role we made takes it: Postgres does not queue two ALTER ROLEs
// of one role in overlapping transactions, it fails the second with XX000 "tuple concurrently
// updated" (postgres-roles.md §2), and GRANT does not lock the granted role at all.
func roleLock(oid int64) string {
	return fmt.Sprintf("SELECT pg_advisory_xact_lock(hashtextextended('millwright.roleset.role:%d', 0));\n", oid)
}

// nameLock is roleLock for a role known by name: the same key (its oid), and no lock if no
// such role exists (the statement that follows then fails or does nothing, as without it).
func nameLock(name string) string {
	return fmt.Sprintf("SELECT pg_advisory_xact_lock(hashtextextended('millwright.roleset.role:' || oid, 0)) FROM pg_roles WHERE rolname = %s;\n", lit(name))
}

// Member is a member role of a set login: its current name and its oid.
type Member struct {
	Name string
	OID  int64
}

// LoginInfo is what the cluster says about a role name.
type LoginInfo struct {
	Exists   bool
	OID      int64
	MemberOf []Member // roles it is a member of
	Members  []string // roles that are members of it, the admin login itself left out
}

// Lookup reads a role by name.
func (c *Cluster) Lookup(ctx context.Context, name string) (LoginInfo, error) {
	var li LoginInfo
	err := c.pool.QueryRow(ctx, `
SELECT r.oid::bigint,
       coalesce((SELECT array_agg(DISTINCT g.rolname::text) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.member
                 WHERE m.roleid = r.oid AND g.rolname <> current_user), '{}')
FROM pg_roles r WHERE r.rolname = $1`, name).Scan(&li.OID, &li.Members)
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

// ---- ownership: what makes a role found on the cluster ours ----

// CommentPrefix starts every comment this service writes on a role it creates.
const CommentPrefix = "millwright roleset "

// Proof makes and checks the ownership proof written as the comment of a role we create: a
// MAC, under a key only this instance holds, of who we are, which role it is to us, and its
// oid. Another holder of CREATEROLE on the cluster can read comments, copy them and write its
// own, but cannot make one that verifies for a role it created (another oid).
type Proof interface {
	Comment(oid int64) string
	Verify(comment string, oid int64) bool
}

// ErrNotOurs is a role under one of our names whose comment does not verify as our
// ownership proof: made by someone else (or forged). It is never adopted, taken back or
// dropped; the caller refuses and leaves it alone.
var ErrNotOurs = errors.New("target: the role on the cluster is not provably ours")

// ErrRoleExists is a role name already taken on the cluster by a role that does not claim to
// be ours (its comment does not start with CommentPrefix).
var ErrRoleExists = errors.New("target: role exists")

// TamperedError is a role that is ours (its proof verifies) but carries what a planter could
// have set and we cannot reset, or failed the check after the reset: the transaction was
// rolled back and the role left as it is.
type TamperedError struct {
	Role  string
	Check string // which check failed
}

func (e *TamperedError) Error() string {
	return fmt.Sprintf("target: role %s was changed on the cluster by someone else: %s", e.Role, e.Check)
}

// roleSpec is what one of our roles must be on the cluster, exactly.
type roleSpec struct {
	name     string
	verifier string
	memberOf []Member // the roles it is a member of (set logins); none for catalog roles
	// adminHolds: the admin is a member of the role (GRANT r TO CURRENT_USER), so a delete can
	// REASSIGN and DROP OWNED. Catalog roles only.
	adminHolds bool
	database   string // the role must have CONNECT on it ("": no check)
	proof      Proof
}

// attrs are the attributes of every role we make. NOSUPERUSER, NOREPLICATION and NOBYPASSRLS
// are the defaults and cannot be written by a non-superuser admin at all (ALTER ROLE refuses
// even the NO forms), so a planter without superuser cannot set them either; they are
// checked, not written.
const attrs = "LOGIN NOCREATEDB NOCREATEROLE INHERIT CONNECTION LIMIT -1 VALID UNTIL 'infinity'"

// ensureRole creates the role of s, or takes back the one of that name that the cluster
// already holds, in one transaction that ends with verifyBlock:
//
//   - absent: CREATE ROLE, its proof as its comment (the oid is known only after the CREATE,
//     hence an explicit transaction rather than one multi-statement query), memberships;
//   - present, proof not verifying: ErrNotOurs (or ErrRoleExists, for a catalog role whose
//     comment does not even claim to be ours), nothing done;
//   - present and ours: refused (TamperedError) if it owns objects or holds grants in any
//     database (pg_shdepend) or is SUPERUSER, REPLICATION or BYPASSRLS, which we cannot undo;
//     otherwise everything a planter could have set is reset: attributes, new password,
//     role-level settings in every database, memberships in both directions.
//
// Then the whole state is checked again before the commit (verifyBlock); a failure rolls
// everything back (TamperedError). It returns the oid and whether a role was taken back,
// whose sessions the caller must end: whoever held the old password or a membership is out.
func (c *Cluster) ensureRole(ctx context.Context, s roleSpec) (int64, bool, error) {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	members := sortedMembers(s.memberOf)
	var locks strings.Builder
	names := make([]string, len(members))
	for i, m := range members {
		if err := checkRoleName(m.Name); err != nil {
			return 0, false, err
		}
		locks.WriteString(roleLock(m.OID))
		names[i] = q(m.Name)
	}
	locks.WriteString(nameLock(s.name)) // after the members': every locker takes them in this order
	if _, err := tx.Exec(ctx, locks.String()); err != nil {
		return 0, false, err
	}
	var oid int64
	var comment *string
	var unsettable, deps bool
	err = tx.QueryRow(ctx, `
SELECT r.oid::bigint, shobj_description(r.oid, 'pg_authid'), r.rolsuper OR r.rolreplication OR r.rolbypassrls,
       EXISTS (SELECT FROM pg_shdepend d WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r.oid
               AND d.classid <> 'pg_auth_members'::regclass)
FROM pg_roles r WHERE r.rolname = $1`, s.name).Scan(&oid, &comment, &unsettable, &deps)
	tookBack := err == nil
	var b strings.Builder
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		in := ""
		if len(names) > 0 {
			in = " IN ROLE " + strings.Join(names, ", ")
		}
		// INHERIT: privileges come through membership, so SET ROLE only narrows. On PG16 the
		// grant's inherit option defaults from the member's INHERIT attribute, so the same
		// statement gives inheriting grants there too (postgres-roles.md §5).
		if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE ROLE %s %s PASSWORD %s%s", q(s.name), attrs, lit(s.verifier), in)); err != nil {
			return 0, false, err
		}
		if err := tx.QueryRow(ctx, `SELECT oid::bigint FROM pg_roles WHERE rolname = $1`, s.name).Scan(&oid); err != nil {
			return 0, false, err
		}
	case err != nil:
		return 0, false, err
	case comment == nil || !s.proof.Verify(*comment, oid):
		if s.adminHolds && (comment == nil || !strings.HasPrefix(*comment, CommentPrefix)) {
			return 0, false, ErrRoleExists
		}
		return 0, false, ErrNotOurs
	case unsettable:
		return 0, false, &TamperedError{Role: s.name, Check: "it is SUPERUSER, REPLICATION or BYPASSRLS"}
	case deps:
		return 0, false, &TamperedError{Role: s.name, Check: "it owns objects or holds privileges on objects (pg_shdepend)"}
	default:
		fmt.Fprintf(&b, "ALTER ROLE %s %s PASSWORD %s;\nALTER ROLE %s RESET ALL;\n", q(s.name), attrs, lit(s.verifier), q(s.name))
		b.WriteString(resetBlock(s.name, oid, oidsOf(members)))
		for _, n := range names {
			fmt.Fprintf(&b, "GRANT %s TO %s;\n", n, q(s.name)) // a NOTICE, no error, if already granted
		}
	}
	if !tookBack {
		fmt.Fprintf(&b, "COMMENT ON ROLE %s IS %s;\n", q(s.name), lit(s.proof.Comment(oid)))
	}
	if s.adminHolds {
		fmt.Fprintf(&b, "GRANT %s TO CURRENT_USER;\n", q(s.name))
	}
	b.WriteString(verifyBlock(s, oid, oidsOf(members)))
	if _, err := tx.Exec(ctx, b.String()); err != nil {
		return 0, false, asTampered(s.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, err
	}
	return oid, tookBack, nil
}

// resetBlock undoes what a planter holding CREATEROLE could have set on the role with oid that
// ALTER ROLE ... RESET ALL does not: its settings in each database (ALTER ROLE ... IN DATABASE
// d SET), its memberships in roles other than keep, and every member of it but the admin
// (whom PG16 makes a member of each role it creates). Names are read from the catalogs inside
// the transaction and quoted with format('%I').
func resetBlock(name string, oid int64, keep []int64) string {
	return fmt.Sprintf(`DO $mw$ DECLARE x record; BEGIN
  FOR x IN SELECT d.datname FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE s.setrole = %[2]d LOOP
    EXECUTE format('ALTER ROLE %%I IN DATABASE %%I RESET ALL', %[1]s, x.datname);
  END LOOP;
  FOR x IN SELECT DISTINCT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
           WHERE m.member = %[2]d AND NOT m.roleid::bigint = ANY ('{%[3]s}'::bigint[]) LOOP
    EXECUTE format('REVOKE %%I FROM %%I', x.rolname, %[1]s);
  END LOOP;
  FOR x IN SELECT DISTINCT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.member
           WHERE m.roleid = %[2]d AND g.rolname <> current_user LOOP
    EXECUTE format('REVOKE %%I FROM %%I', %[1]s, x.rolname);
  END LOOP;
END $mw$;
`, lit(name), oid, joinOIDs(keep))
}

// verifyBlock aborts the transaction unless the role named s.name is the role with oid and
// exactly what s says: our attributes (LOGIN INHERIT, not SUPERUSER, CREATEDB, CREATEROLE,
// REPLICATION or BYPASSRLS, no connection limit, VALID UNTIL infinity); a member of exactly
// memberOf; nobody a member of it but the admin (required when adminHolds); no membership
// granted by it; no role-level setting in any database; no owned object or privilege in any
// database (pg_shdepend); CONNECT on s.database if set. What "can authenticate, with exactly
// these roles, and nothing else" means on the cluster side; the password half is ours (the
// verifier just set is the one built from the stored password).
//
// "Nobody" leaves out the admin login this service runs as: on PG16 and later a CREATEROLE
// role that creates a role is granted it automatically (with ADMIN OPTION, which it needs to
// manage it), and the admin is already a member of every role the login holds.
func verifyBlock(s roleSpec, oid int64, memberOf []int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, `DO $mw$ DECLARE l oid; me oid := (SELECT oid FROM pg_roles WHERE rolname = current_user); BEGIN
  SELECT oid INTO l FROM pg_roles WHERE rolname = %[1]s AND oid = %[2]d;
  IF l IS NULL THEN RAISE EXCEPTION 'millwright: the role is missing or has another oid'; END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE oid = l AND rolcanlogin AND rolinherit AND NOT rolsuper AND NOT rolcreatedb
       AND NOT rolcreaterole AND NOT rolreplication AND NOT rolbypassrls AND rolconnlimit = -1 AND rolvaliduntil = 'infinity')
     THEN RAISE EXCEPTION 'millwright: attributes differ from %[4]s'; END IF;
  IF (SELECT coalesce(array_agg(DISTINCT roleid::bigint ORDER BY roleid::bigint), '{}') FROM pg_auth_members WHERE member = l)
     IS DISTINCT FROM '{%[3]s}'::bigint[] THEN RAISE EXCEPTION 'millwright: membership mismatch'; END IF;
  IF EXISTS (SELECT FROM pg_auth_members WHERE roleid = l AND member <> me)
     THEN RAISE EXCEPTION 'millwright: the role has members'; END IF;
  IF EXISTS (SELECT FROM pg_auth_members WHERE grantor = l)
     THEN RAISE EXCEPTION 'millwright: the role granted memberships'; END IF;
  IF EXISTS (SELECT FROM pg_db_role_setting WHERE setrole = l)
     THEN RAISE EXCEPTION 'millwright: the role has role-level settings'; END IF;
  IF EXISTS (SELECT FROM pg_shdepend WHERE refclassid = 'pg_authid'::regclass AND refobjid = l AND classid <> 'pg_auth_members'::regclass)
     THEN RAISE EXCEPTION 'millwright: the role owns objects or holds privileges on objects'; END IF;
`, lit(s.name), oid, joinOIDs(memberOf), strings.ReplaceAll(attrs, "'", ""))
	if s.adminHolds {
		b.WriteString(`  IF NOT EXISTS (SELECT FROM pg_auth_members WHERE roleid = l AND member = me)
     THEN RAISE EXCEPTION 'millwright: the admin is not a member'; END IF;
`)
	}
	if s.database != "" {
		fmt.Fprintf(&b, "  IF NOT has_database_privilege(l, %s, 'CONNECT') THEN RAISE EXCEPTION 'millwright: no CONNECT'; END IF;\n", lit(s.database))
	}
	b.WriteString("END $mw$;\n")
	return b.String()
}

// IsMissingRole reports whether err is the cluster's "role does not exist" (SQLSTATE 42704,
// undefined_object): the role is already gone, which a retire or a drop counts as done.
func IsMissingRole(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "42704"
}

// asTampered turns a verifyBlock refusal (raise_exception with our prefix) into a TamperedError.
func asTampered(role string, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "P0001" && strings.HasPrefix(pg.Message, "millwright: ") {
		return &TamperedError{Role: role, Check: strings.TrimPrefix(pg.Message, "millwright: ")}
	}
	return err
}

func joinOIDs(oids []int64) string {
	arr := make([]string, len(oids))
	for i, o := range oids {
		arr[i] = strconv.FormatInt(o, 10)
	}
	return strings.Join(arr, ",")
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

// EnsureSetLogin creates login as a LOGIN, INHERIT member of exactly members, with the
// verifier and its ownership proof, taking each member role's lock (the orphan membership
// race: DropRole takes it too). A login of that name already on the cluster (a crash after
// the cluster commit left it without a row) is taken back only if its proof verifies, reset
// and checked as ensureRole says, then its sessions are ended. It reports whether it took a
// login back; ErrNotOurs and *TamperedError are refusals that changed nothing.
func (c *Cluster) EnsureSetLogin(ctx context.Context, login, verifier string, members []Member, database string, proof Proof) (bool, error) {
	if err := CheckSetLoginName(login); err != nil {
		return false, err
	}
	if err := checkVerifier(verifier); err != nil {
		return false, err
	}
	_, tookBack, err := c.ensureRole(ctx, roleSpec{name: login, verifier: verifier, memberOf: members, database: database, proof: proof})
	if err != nil || !tookBack {
		return tookBack, err
	}
	return true, c.Terminate(ctx, login)
}

// TerminateBackend ends one backend and waits (until ctx ends) for it to be gone from
// pg_stat_activity. It polls every 2 ms rather than use pg_terminate_backend's own wait, which
// checks only every 100 ms: a revocation waits for the backend's exit, not for the next tick.
func (c *Cluster) TerminateBackend(ctx context.Context, pid uint32) error {
	if _, err := c.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)); err != nil {
		return err
	}
	for {
		var alive bool
		if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, int64(pid)).Scan(&alive); err != nil {
			return err
		}
		if !alive {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
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
	if _, err := c.pool.Exec(ctx, nameLock(login)+fmt.Sprintf(`DO $mw$ BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = %s) THEN EXECUTE %s; END IF; END $mw$`,
		lit(login), lit("ALTER ROLE "+q(login)+" NOLOGIN"))); err != nil {
		return err
	}
	failpoint.Hit("roleset/retire/nologin")
	if err := c.Terminate(ctx, login); err != nil {
		return err
	}
	failpoint.Hit("roleset/retire/terminated")
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if _, err = c.pool.Exec(ctx, nameLock(login)+"DROP ROLE IF EXISTS "+q(login)); err == nil {
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

// CreateRole creates a catalog role: LOGIN with the verifier, its ownership proof as its
// comment, granted to the admin (so a later delete can REASSIGN/DROP OWNED), in one
// transaction. A role of that name whose proof verifies (an interrupted creation of ours) is
// taken back as ensureRole says and its sessions ended; one whose comment claims to be ours
// without verifying is ErrNotOurs; any other is ErrRoleExists. It returns the oid.
func (c *Cluster) CreateRole(ctx context.Context, name, verifier string, proof Proof) (int64, error) {
	if err := checkRoleName(name); err != nil {
		return 0, err
	}
	if err := checkVerifier(verifier); err != nil {
		return 0, err
	}
	oid, tookBack, err := c.ensureRole(ctx, roleSpec{name: name, verifier: verifier, adminHolds: true, proof: proof})
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "42710" || pg.Code == "23505") { // created meanwhile by someone else
		return 0, ErrRoleExists
	}
	if err != nil || !tookBack {
		return oid, err
	}
	return oid, c.Terminate(ctx, name)
}

// RoleName returns the current name of the role with oid, if it exists, and whether it is ours
// by proof.
func (c *Cluster) RoleName(ctx context.Context, oid int64, proof Proof) (string, bool, error) {
	var name string
	var comment *string
	err := c.pool.QueryRow(ctx, `SELECT rolname::text, shobj_description(oid, 'pg_authid') FROM pg_roles WHERE oid = $1`, oid).Scan(&name, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return name, comment != nil && proof.Verify(*comment, oid), nil
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
	if _, err := c.pool.Exec(ctx, nameLock(name)+"ALTER ROLE "+q(name)+" "+attr); err != nil {
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
	_, err := c.pool.Exec(ctx, nameLock(from)+"ALTER ROLE "+q(from)+" RENAME TO "+q(to))
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42710" {
		return ErrRoleExists
	}
	return err
}

// DropRole drops the catalog role with oid (if it still exists and its proof verifies): its
// sessions are ended, in every database where it owns objects or holds privileges they are
// reassigned to the admin and its privileges dropped, then the role is dropped under its lock.
func (c *Cluster) DropRole(ctx context.Context, oid int64, proof Proof) error {
	name, ours, err := c.RoleName(ctx, oid, proof)
	if err != nil || name == "" {
		return err
	}
	if !ours {
		return ErrNotOurs // not ours any more: never drop it
	}
	if err := checkRoleName(name); err != nil {
		return err
	}
	if _, err := c.pool.Exec(ctx, roleLock(oid)+"ALTER ROLE "+q(name)+" NOLOGIN"); err != nil {
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
