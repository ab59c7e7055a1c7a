package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the service database.
type Store struct {
	Pool *pgxpool.Pool
}

// New wraps a pool.
func New(pool *pgxpool.Pool) *Store { return &Store{Pool: pool} }

// Errors the domain maps to gRPC codes.
var (
	ErrNotFound      = errors.New("store: not found")
	ErrAlreadyExists = errors.New("store: already exists")
)

// Cluster is a registered target cluster.
type Cluster struct {
	ID               string
	Host             string
	Port             int
	MaintenanceDB    string
	AdminUser        string
	AdminPasswordEnc []byte
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// Role states.
const (
	StateCreating = "creating"
	StateReady    = "ready"
	StateDeleting = "deleting"
)

// Role is a catalog row.
type Role struct {
	ID          int64
	ClusterID   string
	Name        string
	Enabled     bool
	State       string
	OID         int64 // 0 until created
	PasswordEnc []byte
	CreatedAt   time.Time
	InstanceID  string // "" for a row made before instances were recorded (unclaimed)
}

// Usable reports whether the role may be handed out at all.
func (r Role) Usable() bool { return r.Enabled && r.State == StateReady }

// Datatable is a workspace's data table.
type Datatable struct {
	Workspace        string
	Name             string
	ClusterID        string
	Database         string
	AdminUser        string
	AdminPasswordEnc []byte
	DefaultRole      string
	// ViewerAccess: jobs may connect ?as=viewer (the data table opted in).
	ViewerAccess bool
	// CredentialMode is ModeDirect or ModeProxy.
	CredentialMode string
	Roles          map[string][]string // role id or "admin" -> tenants
}

// Credential modes of a data table (datatable.credential_mode).
const (
	ModeDirect = "direct"
	ModeProxy  = "proxy"
)

// RoleSet is a datatable_role_set row.
type RoleSet struct {
	ClusterID   string
	Login       string
	InstanceID  string
	RoleIDs     []int64
	OIDs        []int64
	PasswordEnc []byte
	CreatedAt   time.Time
	LastUsedAt  time.Time
}

func uniqueViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505"
}

func fkViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23503"
}

// ---- clusters ----

// UpsertCluster inserts or replaces a cluster.
func (s *Store) UpsertCluster(ctx context.Context, c Cluster) (Cluster, error) {
	err := s.Pool.QueryRow(ctx, `
INSERT INTO cluster (id, host, port, maintenance_db, admin_user, admin_password_enc)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, port = EXCLUDED.port,
    maintenance_db = EXCLUDED.maintenance_db, admin_user = EXCLUDED.admin_user,
    admin_password_enc = EXCLUDED.admin_password_enc, updated_at = now()
RETURNING created_at, updated_at`,
		c.ID, c.Host, c.Port, c.MaintenanceDB, c.AdminUser, c.AdminPasswordEnc).Scan(&c.CreatedAt, &c.UpdatedAt)
	return c, err
}

const clusterCols = `id, host, port, maintenance_db, admin_user, admin_password_enc, created_at, updated_at`

// notFound is a single-row read's error: ErrNotFound for no row, anything else as it is.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

func scanCluster(row pgx.Row) (Cluster, error) {
	var c Cluster
	err := row.Scan(&c.ID, &c.Host, &c.Port, &c.MaintenanceDB, &c.AdminUser, &c.AdminPasswordEnc, &c.CreatedAt, &c.UpdatedAt)
	return c, notFound(err)
}

// GetCluster reads one cluster.
func (s *Store) GetCluster(ctx context.Context, id string) (Cluster, error) {
	return scanCluster(s.Pool.QueryRow(ctx, `SELECT `+clusterCols+` FROM cluster WHERE id = $1`, id))
}

// ClusterFilter selects clusters for ListClusters: every one (the List has no filter yet; the
// type keeps its shape the shape of every List of the store).
type ClusterFilter struct{}

// String names the filter; a page token is bound to it (pkg/paging).
func (ClusterFilter) String() string { return "clusters" }

// ListClusters reads at most limit clusters by id, those after the id after ("": from the
// first).
func (s *Store) ListClusters(ctx context.Context, _ ClusterFilter, after string, limit int) ([]Cluster, error) {
	return collect(scanCluster)(s.Pool.Query(ctx, `SELECT `+clusterCols+` FROM cluster WHERE id > $1 ORDER BY id LIMIT $2`,
		after, limit))
}

// collect turns a row scanner into the reader of a whole query's rows (nil when there are
// none), so the store's list reads share one loop: collect(scanX)(pool.Query(...)).
func collect[T any](scan func(pgx.Row) (T, error)) func(pgx.Rows, error) ([]T, error) {
	return func(rows pgx.Rows, err error) ([]T, error) {
		if err != nil {
			return nil, err
		}
		return pgx.AppendRows([]T(nil), rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	}
}

// ---- roles ----

const roleCols = `id, cluster_id, name, enabled, state, coalesce(oid, 0), password_enc, created_at, coalesce(instance_id, '')`

func scanRole(row pgx.Row) (Role, error) {
	var r Role
	err := row.Scan(&r.ID, &r.ClusterID, &r.Name, &r.Enabled, &r.State, &r.OID, &r.PasswordEnc, &r.CreatedAt, &r.InstanceID)
	return r, notFound(err)
}

var collectRoles = collect(scanRole)

// querier is the pool, or the one connection a RoleCreation holds its lock on.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RoleCreation is one CreateRole holding the lock of its (cluster, role name) for the whole
// creation: catalog row in state creating (own commit), CREATE ROLE or take-back on the
// cluster, row ready (own commit). It is the session lock of LockLogin, keyed by the role name:
// a catalog role name can never be a set-login name (the wm_set_ prefix is reserved), so the
// two never share a key. Every service-DB statement of the creation runs on the lock's own
// connection, so a creation holds one pool connection, never one while waiting for another:
// waiters queued on the lock (each holding the connection it waits on) cannot starve the
// holder, whatever the pool size.
type RoleCreation struct {
	lock *LoginLock
}

// BeginRoleCreation waits for the lock of the role name on the cluster. End releases it.
func (s *Store) BeginRoleCreation(ctx context.Context, clusterID, name string) (*RoleCreation, error) {
	lock, _, err := s.LockLogin(ctx, clusterID, name, false)
	if err != nil {
		return nil, err
	}
	return &RoleCreation{lock: lock}, nil
}

// End releases the lock (or closes the connection, which releases it too).
func (c *RoleCreation) End() { c.lock.Unlock() }

// InsertCreatingRole records the role about to be created (state creating), in its own commit.
// Under the lock it also re-reads the row: one in state creating (an interrupted creation) is
// returned with resumed=true so the caller finishes it; any other existing row (a racer that
// held the lock before us made it ready, or it is being deleted) is ErrAlreadyExists.
func (c *RoleCreation) InsertCreatingRole(ctx context.Context, instanceID string) (r Role, resumed bool, err error) {
	q, clusterID, name := c.lock.conn, c.lock.clusterID, c.lock.login
	r, err = scanRole(q.QueryRow(ctx, `
INSERT INTO datatable_role (cluster_id, name, instance_id) VALUES ($1, $2, $3)
ON CONFLICT (cluster_id, name) DO NOTHING
RETURNING `+roleCols, clusterID, name, instanceID))
	switch {
	case err == nil:
		return r, false, nil
	case fkViolation(err):
		return r, false, fmt.Errorf("cluster %q: %w", clusterID, ErrNotFound)
	case !errors.Is(err, ErrNotFound):
		return r, false, err
	}
	r, err = roleByName(ctx, q, clusterID, name)
	if err != nil {
		return r, false, err
	}
	if r.State != StateCreating {
		return r, false, ErrAlreadyExists
	}
	return r, true, nil
}

// MarkRoleReady completes the creation (commits before End releases the lock, so the next
// holder re-reads a ready row).
func (c *RoleCreation) MarkRoleReady(ctx context.Context, id, oid int64, pwEnc []byte) (Role, error) {
	return scanRole(c.lock.conn.QueryRow(ctx, `
UPDATE datatable_role SET state = 'ready', oid = $2, password_enc = $3, updated_at = now()
WHERE id = $1 AND state = 'creating' RETURNING `+roleCols, id, oid, pwEnc))
}

// DeleteCreatingRole forgets a creation that was refused (the name is taken on the cluster by a
// role that is not ours). Under the lock no other creation is working on the row.
func (c *RoleCreation) DeleteCreatingRole(ctx context.Context, id int64) error {
	_, err := c.lock.conn.Exec(ctx, `DELETE FROM datatable_role WHERE id = $1 AND state = 'creating'`, id)
	return err
}

// Role reads one role.
func (s *Store) Role(ctx context.Context, id int64) (Role, error) {
	return scanRole(s.Pool.QueryRow(ctx, `SELECT `+roleCols+` FROM datatable_role WHERE id = $1`, id))
}

// RoleByName reads one role by name.
func (s *Store) RoleByName(ctx context.Context, clusterID, name string) (Role, error) {
	return roleByName(ctx, s.Pool, clusterID, name)
}

func roleByName(ctx context.Context, q querier, clusterID, name string) (Role, error) {
	return scanRole(q.QueryRow(ctx, `SELECT `+roleCols+` FROM datatable_role WHERE cluster_id = $1 AND name = $2`, clusterID, name))
}

// RoleFilter selects a cluster's roles for ListRoles.
type RoleFilter struct {
	ClusterID  string
	Usable     *bool  // nil: any; else only the roles whose Usable() is this
	NamePrefix string // "": any name
}

// String names the filters; a page token is bound to it (pkg/paging), so it differs whenever
// the rows selected may (an unset Usable differs from both values).
func (f RoleFilter) String() string {
	usable := "any"
	if f.Usable != nil {
		usable = strconv.FormatBool(*f.Usable)
	}
	return fmt.Sprintf("roles cluster=%q usable=%s prefix=%q", f.ClusterID, usable, f.NamePrefix)
}

// ListRoles reads at most limit of a cluster's roles by name, those after the name after ("":
// from the first).
func (s *Store) ListRoles(ctx context.Context, f RoleFilter, after string, limit int) ([]Role, error) {
	return collectRoles(s.Pool.Query(ctx, `SELECT `+roleCols+` FROM datatable_role
WHERE cluster_id = $1 AND name > $2 AND starts_with(name, $3)
  AND ($4::boolean IS NULL OR (enabled AND state = 'ready') = $4)
ORDER BY name LIMIT $5`, f.ClusterID, after, f.NamePrefix, f.Usable, limit))
}

// InstanceRoles reads the roles of one instance, and the unclaimed ones (made before
// instances were recorded), for the reconciler.
func (s *Store) InstanceRoles(ctx context.Context, instanceID string) ([]Role, error) {
	return collectRoles(s.Pool.Query(ctx, `SELECT `+roleCols+` FROM datatable_role
WHERE instance_id = $1 OR instance_id IS NULL ORDER BY id`, instanceID))
}

// ClaimRole records an unclaimed role as the instance's; false if it was claimed already.
func (s *Store) ClaimRole(ctx context.Context, id int64, instanceID string) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `UPDATE datatable_role SET instance_id = $2 WHERE id = $1 AND instance_id IS NULL`, id, instanceID)
	return tag.RowsAffected() == 1, err
}

// RolesByIDs reads the roles with these ids.
func (s *Store) RolesByIDs(ctx context.Context, ids []int64) ([]Role, error) {
	return collectRoles(s.Pool.Query(ctx, `SELECT `+roleCols+` FROM datatable_role WHERE id = ANY($1) ORDER BY id`, ids))
}

// SetRoleEnabled flips enabled on a ready role. It waits for every in-flight set-login
// creation holding the role (they read it FOR SHARE), which is what makes "disable, then
// retire the set logins holding it" miss none.
func (s *Store) SetRoleEnabled(ctx context.Context, id int64, enabled bool) (Role, error) {
	return scanRole(s.Pool.QueryRow(ctx, `
UPDATE datatable_role SET enabled = $2, updated_at = now()
WHERE id = $1 AND state = 'ready' RETURNING `+roleCols, id, enabled))
}

// WhileRoleEnabled runs fn only if the role is ready and enabled, holding its row (FOR SHARE)
// until fn returns. A disable (an UPDATE of the row) then either committed first, and fn does
// not run, or waits for fn, and its NOLOGIN lands after whatever fn did on the cluster. It
// reports whether fn ran.
func (s *Store) WhileRoleEnabled(ctx context.Context, id int64, fn func() error) (bool, error) {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var enabled bool
	err = tx.QueryRow(ctx, `SELECT enabled AND state = 'ready' FROM datatable_role WHERE id = $1 FOR SHARE`, id).Scan(&enabled)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !enabled) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := fn(); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// RenameRole records a new name (after the cluster rename committed).
func (s *Store) RenameRole(ctx context.Context, id int64, name string) (Role, error) {
	r, err := scanRole(s.Pool.QueryRow(ctx, `
UPDATE datatable_role SET name = $2, updated_at = now() WHERE id = $1 RETURNING `+roleCols, id, name))
	if uniqueViolation(err) {
		return r, ErrAlreadyExists
	}
	return r, err
}

// MarkRoleDeleting starts a deletion: the role is disabled and in state deleting, and it leaves
// every data table's permissions (a default role naming it becomes '$none', never admin), all in
// one commit.
func (s *Store) MarkRoleDeleting(ctx context.Context, id int64) (Role, error) {
	var r Role
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		r, err = scanRole(tx.QueryRow(ctx, `
UPDATE datatable_role SET state = 'deleting', enabled = false, updated_at = now()
WHERE id = $1 AND state IN ('ready', 'deleting') RETURNING `+roleCols, id))
		if err != nil {
			return err
		}
		key := fmt.Sprint(id)
		_, err = tx.Exec(ctx, `
UPDATE datatable SET roles = roles - $1::text,
    default_role = CASE WHEN default_role = $1::text THEN '$none' ELSE default_role END,
    updated_at = now()
WHERE roles ? $1::text OR default_role = $1::text`, key)
		return err
	})
	return r, err
}

// DeleteRoleRow forgets a role once it is dropped on the cluster.
func (s *Store) DeleteRoleRow(ctx context.Context, id int64) error {
	_, err := s.Pool.Exec(ctx, `DELETE FROM datatable_role WHERE id = $1 AND state IN ('deleting', 'creating')`, id)
	return err
}

// ---- data tables ----

// UpsertDatatable inserts or replaces a data table's connection and default role; its
// permissions (roles) are kept. viewerAccess nil keeps the stored opt-in (off for a new data
// table); d.ViewerAccess is ignored and returned as stored.
func (s *Store) UpsertDatatable(ctx context.Context, d Datatable, viewerAccess *bool) (Datatable, error) {
	var mode *string // "" keeps the stored mode (proxy for a new data table)
	if d.CredentialMode != "" {
		mode = &d.CredentialMode
	}
	var raw []byte
	var attached bool
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// The default role (a role id) must be a key of the roles kept: checked on the row
		// written, in the same transaction, so a refused upsert writes nothing.
		err := tx.QueryRow(ctx, `
INSERT INTO datatable (workspace, name, cluster_id, database, admin_user, admin_password_enc, default_role, viewer_access, credential_mode)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, false), coalesce($9, 'proxy'))
ON CONFLICT (workspace, name) DO UPDATE SET cluster_id = EXCLUDED.cluster_id,
    database = EXCLUDED.database, admin_user = EXCLUDED.admin_user,
    admin_password_enc = EXCLUDED.admin_password_enc, default_role = EXCLUDED.default_role,
    viewer_access = coalesce($8, datatable.viewer_access),
    credential_mode = coalesce($9, datatable.credential_mode),
    roles = CASE WHEN datatable.cluster_id = EXCLUDED.cluster_id THEN datatable.roles ELSE '{}'::jsonb END,
    updated_at = now()
RETURNING roles, viewer_access, credential_mode, default_role IN ('admin', '$none') OR roles ? default_role`,
			d.Workspace, d.Name, d.ClusterID, d.Database, d.AdminUser, d.AdminPasswordEnc, d.DefaultRole, viewerAccess, mode).Scan(
			&raw, &d.ViewerAccess, &d.CredentialMode, &attached)
		if err == nil && !attached {
			return ErrDefaultNotAttached
		}
		return err
	})
	if fkViolation(err) {
		return d, fmt.Errorf("cluster %q: %w", d.ClusterID, ErrNotFound)
	}
	if err != nil {
		return d, err
	}
	err = json.Unmarshal(raw, &d.Roles)
	return d, err
}

const datatableCols = `workspace, name, cluster_id, database, admin_user, admin_password_enc, default_role, viewer_access,
    credential_mode, roles`

func scanDatatable(row pgx.Row) (Datatable, error) {
	var d Datatable
	var raw []byte
	err := row.Scan(&d.Workspace, &d.Name, &d.ClusterID, &d.Database, &d.AdminUser, &d.AdminPasswordEnc, &d.DefaultRole,
		&d.ViewerAccess, &d.CredentialMode, &raw)
	if err != nil {
		return d, notFound(err)
	}
	err = json.Unmarshal(raw, &d.Roles)
	return d, err
}

// GetDatatable reads a data table.
func (s *Store) GetDatatable(ctx context.Context, workspace, name string) (Datatable, error) {
	return scanDatatable(s.Pool.QueryRow(ctx, `SELECT `+datatableCols+` FROM datatable WHERE workspace = $1 AND name = $2`,
		workspace, name))
}

// DatatableFilter selects a workspace's data tables for ListDatatables.
type DatatableFilter struct {
	Workspace      string
	ClusterID      string // "": any cluster
	CredentialMode string // "": any mode
}

// String names the filters; a page token is bound to it (pkg/paging).
func (f DatatableFilter) String() string {
	return fmt.Sprintf("datatables workspace=%q cluster=%q mode=%q", f.Workspace, f.ClusterID, f.CredentialMode)
}

// ListDatatables reads at most limit of a workspace's data tables by name, those after the
// name after ("": from the first).
func (s *Store) ListDatatables(ctx context.Context, f DatatableFilter, after string, limit int) ([]Datatable, error) {
	return collect(scanDatatable)(s.Pool.Query(ctx, `SELECT `+datatableCols+` FROM datatable
WHERE workspace = $1 AND name > $2 AND ($3 = '' OR cluster_id = $3) AND ($4 = '' OR credential_mode = $4)
ORDER BY name LIMIT $5`, f.Workspace, after, f.ClusterID, f.CredentialMode, limit))
}

// SetPermissions replaces default role and tenants. Role ids other than "admin" must be ready
// roles of the data table's cluster: checked in the same transaction, with the role rows held
// FOR SHARE so a concurrent delete cannot slip between the check and the write.
func (s *Store) SetPermissions(ctx context.Context, workspace, name, defaultRole string, roles map[string][]string, roleIDs []int64) (Datatable, error) {
	var d Datatable
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var clusterID string
		err := tx.QueryRow(ctx, `SELECT cluster_id FROM datatable WHERE workspace = $1 AND name = $2 FOR UPDATE`, workspace, name).Scan(&clusterID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `
SELECT count(*) FROM (SELECT id FROM datatable_role WHERE id = ANY($1) AND cluster_id = $2 AND state = 'ready' FOR SHARE) r`,
			roleIDs, clusterID).Scan(&n); err != nil {
			return err
		}
		if n != len(roleIDs) {
			return ErrUnknownRole
		}
		raw, err := json.Marshal(roles)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE datatable SET default_role = $3, roles = $4, updated_at = now() WHERE workspace = $1 AND name = $2`,
			workspace, name, defaultRole, raw); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	return s.GetDatatable(ctx, workspace, name)
}

// ErrDefaultNotAttached is a default role id that is not a key of the data table's roles.
var ErrDefaultNotAttached = errors.New("store: default role not attached to the data table")

// ErrUnknownRole is a permissions entry naming no ready role of the cluster.
var ErrUnknownRole = errors.New("store: unknown role")

// DatabasesOfCluster lists the distinct target databases registered on a cluster.
func (s *Store) DatabasesOfCluster(ctx context.Context, clusterID string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT database FROM datatable WHERE cluster_id = $1 ORDER BY 1`, clusterID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ---- role-set logins ----

const roleSetCols = `cluster_id, login, instance_id, role_ids, oids, password_enc, created_at, last_used_at`

func scanRoleSet(row pgx.Row) (RoleSet, error) {
	var r RoleSet
	err := row.Scan(&r.ClusterID, &r.Login, &r.InstanceID, &r.RoleIDs, &r.OIDs, &r.PasswordEnc, &r.CreatedAt, &r.LastUsedAt)
	return r, notFound(err)
}

// RoleSet reads a login's row.
func (s *Store) RoleSet(ctx context.Context, clusterID, login string) (RoleSet, error) {
	return scanRoleSet(s.Pool.QueryRow(ctx, `SELECT `+roleSetCols+` FROM datatable_role_set WHERE cluster_id = $1 AND login = $2`, clusterID, login))
}

// RoleSetAge reads a login's row and how old its last_used_at is by the database clock (the
// clock the sweep's cutoff is taken from, so replicas' clocks do not matter).
func (s *Store) RoleSetAge(ctx context.Context, clusterID, login string) (RoleSet, time.Duration, error) {
	var r RoleSet
	var age time.Duration
	err := s.Pool.QueryRow(ctx, `SELECT `+roleSetCols+`, now() - last_used_at FROM datatable_role_set
WHERE cluster_id = $1 AND login = $2`, clusterID, login).Scan(
		&r.ClusterID, &r.Login, &r.InstanceID, &r.RoleIDs, &r.OIDs, &r.PasswordEnc, &r.CreatedAt, &r.LastUsedAt, &age)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, 0, ErrNotFound
	}
	return r, age, err
}

// TouchRoleSet moves a login's last_used_at to now and returns the row, or ErrNotFound when
// there is none: a sweep that deleted the row first is seen, never ignored. A sweep deleting
// after this commits re-checks last_used_at in its DELETE and keeps the row. Callers touch
// only rows older than a fraction of the sweep age, so this writes at most once a day.
func (s *Store) TouchRoleSet(ctx context.Context, clusterID, login string) (RoleSet, error) {
	return scanRoleSet(s.Pool.QueryRow(ctx, `UPDATE datatable_role_set SET last_used_at = now()
WHERE cluster_id = $1 AND login = $2 RETURNING `+roleSetCols, clusterID, login))
}

// Now is the database clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&t)
	return t, err
}

// RoleSetsHolding lists the logins whose set holds the role.
func (s *Store) RoleSetsHolding(ctx context.Context, roleID int64) ([]RoleSet, error) {
	return s.roleSets(ctx, `SELECT `+roleSetCols+` FROM datatable_role_set WHERE role_ids @> ARRAY[$1::bigint] ORDER BY login`, roleID)
}

// UnusedRoleSets lists at most limit of this instance's logins unused since cutoff, oldest
// first.
func (s *Store) UnusedRoleSets(ctx context.Context, instanceID string, cutoff time.Time, limit int) ([]RoleSet, error) {
	return s.roleSets(ctx, `SELECT `+roleSetCols+` FROM datatable_role_set
WHERE instance_id = $1 AND last_used_at < $2 ORDER BY last_used_at, login LIMIT $3`, instanceID, cutoff, limit)
}

func (s *Store) roleSets(ctx context.Context, q string, args ...any) ([]RoleSet, error) {
	return collect(scanRoleSet)(s.Pool.Query(ctx, q, args...))
}

// Retiring is a retire-journal entry.
type Retiring struct {
	ClusterID string
	Login     string
	Reason    string
}

// RetiringEntries lists this instance's unfinished retires.
func (s *Store) RetiringEntries(ctx context.Context, instanceID string, limit int) ([]Retiring, error) {
	rows, err := s.Pool.Query(ctx, `SELECT cluster_id, login, reason FROM datatable_role_set_retiring
WHERE instance_id = $1 ORDER BY created_at, login LIMIT $2`, instanceID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Retiring, error) {
		var e Retiring
		err := r.Scan(&e.ClusterID, &e.Login, &e.Reason)
		return e, err
	})
}

// lockKeySQL is the advisory-lock key of one role name's lifecycle on a cluster: a set login's
// (ensure, retire, sweep) or a catalog role's creation (RoleCreation). Computed in SQL so
// every replica (whatever its build) derives the same key.
const lockKeySQL = `hashtextextended('millwright.roleset:' || $1::text || ':' || $2::text, 0)`

// EnsureTx is the transaction in which a set login is made: it holds the login's advisory lock
// from before the cluster is looked at until the row commits, so a racing replica waits and
// then finds the row (and its password) instead of creating or re-keying the login.
type EnsureTx struct {
	tx pgx.Tx
}

// BeginEnsure opens the transaction and takes the login's lock (waiting for a racer).
func (s *Store) BeginEnsure(ctx context.Context, clusterID, login string) (*EnsureTx, error) {
	tx, err := s.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+lockKeySQL+`)`, clusterID, login); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return &EnsureTx{tx: tx}, nil
}

// RoleSet reads the row under the lock (READ COMMITTED: this statement sees a racer's commit).
func (e *EnsureTx) RoleSet(ctx context.Context, clusterID, login string) (RoleSet, error) {
	return scanRoleSet(e.tx.QueryRow(ctx, `SELECT `+roleSetCols+` FROM datatable_role_set WHERE cluster_id = $1 AND login = $2`, clusterID, login))
}

// HoldUsableRoles reads the roles FOR SHARE and reports whether all are ready and enabled with
// the expected oids. Holding them blocks a disable or delete until this transaction ends; a
// disable that committed first is seen here (READ COMMITTED re-reads locked rows).
func (e *EnsureTx) HoldUsableRoles(ctx context.Context, ids, oids []int64) (bool, error) {
	rows, err := e.tx.Query(ctx, `SELECT id, coalesce(oid, 0) FROM datatable_role
WHERE id = ANY($1) AND enabled AND state = 'ready' ORDER BY id FOR SHARE`, ids)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var gotOIDs []int64
	for rows.Next() {
		var id, oid int64
		if err := rows.Scan(&id, &oid); err != nil {
			return false, err
		}
		gotOIDs = append(gotOIDs, oid)
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	slices.Sort(gotOIDs)
	want := slices.Clone(oids)
	slices.Sort(want)
	return slices.Equal(gotOIDs, want), nil
}

// InsertRoleSet writes the row and drops any retire-journal entry of the login (the login was
// just taken back), in the ensure transaction.
func (e *EnsureTx) InsertRoleSet(ctx context.Context, r RoleSet) error {
	if _, err := e.tx.Exec(ctx, `
INSERT INTO datatable_role_set (cluster_id, login, instance_id, role_ids, oids, password_enc)
VALUES ($1, $2, $3, $4, $5, $6)`, r.ClusterID, r.Login, r.InstanceID, r.RoleIDs, r.OIDs, r.PasswordEnc); err != nil {
		return err
	}
	_, err := e.tx.Exec(ctx, `DELETE FROM datatable_role_set_retiring WHERE cluster_id = $1 AND login = $2`, r.ClusterID, r.Login)
	return err
}

// Commit commits.
func (e *EnsureTx) Commit(ctx context.Context) error { return e.tx.Commit(ctx) }

// Rollback rolls back (safe after Commit).
func (e *EnsureTx) Rollback(ctx context.Context) { _ = e.tx.Rollback(ctx) }

// LoginLock is a session-level hold of a login's lock, for the multi-commit retire: row delete
// (own commit), then NOLOGIN, terminate and DROP on the cluster, then the journal entry (and,
// keyed by a catalog role name, for the multi-commit CreateRole: RoleCreation). The
// lock is released by Unlock, or by Postgres when the connection dies (a crashed replica never
// leaves it held).
type LoginLock struct {
	conn             *pgxpool.Conn
	clusterID, login string
}

// LockLogin waits for the login's lock (try=false) or gives up at once when another replica
// holds it (try=true: the sweep, which skips what someone else is handling).
func (s *Store) LockLogin(ctx context.Context, clusterID, login string, try bool) (*LoginLock, bool, error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	fn := "pg_advisory_lock"
	if try {
		fn = "pg_try_advisory_lock"
	}
	var ok bool
	if try {
		err = conn.QueryRow(ctx, `SELECT `+fn+`(`+lockKeySQL+`)`, clusterID, login).Scan(&ok)
	} else {
		_, err = conn.Exec(ctx, `SELECT `+fn+`(`+lockKeySQL+`)`, clusterID, login)
		ok = err == nil
	}
	if err != nil || !ok {
		if err != nil {
			// The lock state is unknown: never hand this connection back to the pool.
			_ = conn.Conn().Close(context.Background())
		}
		conn.Release()
		return nil, false, err
	}
	return &LoginLock{conn: conn, clusterID: clusterID, login: login}, true, nil
}

// Unlock releases the lock; if that fails the connection is closed, which releases it too.
func (l *LoginLock) Unlock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock(`+lockKeySQL+`)`, l.clusterID, l.login); err != nil {
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
}

// RoleSet reads the row under the lock.
func (l *LoginLock) RoleSet(ctx context.Context) (RoleSet, error) {
	return scanRoleSet(l.conn.QueryRow(ctx, `SELECT `+roleSetCols+` FROM datatable_role_set WHERE cluster_id = $1 AND login = $2`, l.clusterID, l.login))
}

// MoveToJournal deletes the login's row and records the retire in one commit, if the row still
// matches cond ("" for none; the sweep passes its cutoff so a login used since is kept). It
// reports whether a row was moved.
func (l *LoginLock) MoveToJournal(ctx context.Context, instanceID, reason string, unusedSince *time.Time) (bool, error) {
	var moved bool
	err := pgx.BeginFunc(ctx, l.conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM datatable_role_set WHERE cluster_id = $1 AND login = $2
AND ($3::timestamptz IS NULL OR last_used_at < $3)`, l.clusterID, l.login, unusedSince)
		if err != nil {
			return err
		}
		moved = tag.RowsAffected() > 0
		if !moved {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO datatable_role_set_retiring (cluster_id, login, instance_id, reason)
VALUES ($1, $2, $3, $4) ON CONFLICT (cluster_id, login) DO NOTHING`, l.clusterID, l.login, instanceID, reason)
		return err
	})
	return moved, err
}

// InJournal reports whether the login has an unfinished retire.
func (l *LoginLock) InJournal(ctx context.Context) (bool, error) {
	var ok bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM datatable_role_set_retiring WHERE cluster_id = $1 AND login = $2)`, l.clusterID, l.login).Scan(&ok)
	return ok, err
}

// FinishJournal deletes the journal entry once the login is dropped.
func (l *LoginLock) FinishJournal(ctx context.Context) error {
	_, err := l.conn.Exec(ctx, `DELETE FROM datatable_role_set_retiring WHERE cluster_id = $1 AND login = $2`, l.clusterID, l.login)
	return err
}
