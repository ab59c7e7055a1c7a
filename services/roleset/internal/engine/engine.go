package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/millwright/millwright/pkg/failpoint"
	"github.com/millwright/millwright/pkg/revcache"
	"github.com/millwright/millwright/services/roleset/internal/datatableref"
	"github.com/millwright/millwright/services/roleset/internal/rolename"
	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/target"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// touchEvery is how often last_used_at is written per login, at most (a quarter of
// UnusedAfter when that is shorter, so a login in use is never near the sweep's cutoff).
const touchEvery = 24 * time.Hour

// Step names where Config.Step is called, so tests can interleave a resolve and a sweep at
// every step.
const (
	StepEnsureRead    = "ensure: row read"     // fast path, before a stale row is touched
	StepEnsureTouched = "ensure: row touched"  // fast path, after the touch, before hand-out
	StepEnsureLocked  = "ensure: login locked" // slow path, under the login's lock
	StepSweepListed   = "sweep: rows listed"   // unused rows read, before any is locked
	StepSweepLocked   = "sweep: login locked"  // one login locked, before its row is moved
	StepRetireMoved   = "retire: row moved"    // row deleted and journalled, before the drop
)

// Config configures an Engine.
type Config struct {
	// InstanceID names this millwright instance: it is hashed into every set-login name, and
	// the sweep and retire journal go by it.
	InstanceID string
	Keys       *secret.Keyring
	// Iterations of the SCRAM verifiers built for new passwords (secret.DefaultIterations).
	Iterations int
	// UnusedAfter is how long a set login may go unused before the sweep drops it (30 days).
	UnusedAfter time.Duration
	// SweepBatch bounds the logins dropped per batch (1000: DROP ROLE locks each role until
	// commit, postgres-roles.md §1).
	SweepBatch int
	Logger     *slog.Logger
	// Step, when set, is called at each Step* point (tests only: it may block).
	Step func(step string)
	// Proxy is where clients reach this instance's PostgreSQL proxy; zero: no proxy, and a data
	// table in proxy mode is refused (CodeProxyOff).
	Proxy ProxyConfig
}

func (e *Engine) step(name string) {
	if e.cfg.Step != nil {
		e.cfg.Step(name)
	}
}

// touchEvery is how old a set login's last_used_at may get before a use writes it.
func (e *Engine) touchEvery() time.Duration {
	return min(touchEvery, e.cfg.UnusedAfter/4)
}

// Engine is the roleset service's logic over its store, the target clusters and policy.
type Engine struct {
	cfg      Config
	store    *store.Store
	identity Identity
	cache    *Cache

	mu       sync.Mutex
	clusters map[string]clusterConn

	// changed is signalled (without blocking) whenever cached decisions are dropped: the
	// proxy then takes its live sessions' decisions again (Changed); changedIn (under
	// changedMu, not mu: mu is held across cluster connects) says in which workspaces ("" for
	// all).
	changed   chan struct{}
	changedMu sync.Mutex
	changedIn map[string]bool
}

type clusterConn struct {
	conn    *target.Cluster
	updated time.Time
}

// New returns an engine.
func New(cfg Config, st *store.Store, id Identity, cache *Cache) *Engine {
	if cfg.Iterations == 0 {
		cfg.Iterations = secret.DefaultIterations
	}
	if cfg.UnusedAfter == 0 {
		cfg.UnusedAfter = 30 * 24 * time.Hour
	}
	if cfg.SweepBatch <= 0 || cfg.SweepBatch > 1000 {
		cfg.SweepBatch = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cache == nil {
		cache = NewCache(0, 0, nil)
	}
	return &Engine{cfg: cfg, store: st, identity: id, cache: cache, clusters: map[string]clusterConn{},
		changed: make(chan struct{}, 1)}
}

// Close closes the cluster pools.
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.clusters {
		c.conn.Close()
	}
	e.clusters = map[string]clusterConn{}
}

// AAD strings bind each ciphertext to its row.
func clusterAAD(id string) string             { return "cluster:" + id }
func roleAAD(id int64) string                 { return "role:" + strconv.FormatInt(id, 10) }
func datatableAAD(ws, name string) string     { return "datatable:" + ws + "/" + name }
func roleSetAAD(cluster, login string) string { return "roleset:" + cluster + "/" + login }

// target returns the (cached) admin connection to a cluster; a changed registration reopens it.
func (e *Engine) target(ctx context.Context, c store.Cluster) (*target.Cluster, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cc, ok := e.clusters[c.ID]; ok && cc.updated.Equal(c.UpdatedAt) {
		return cc.conn, nil
	} else if ok {
		cc.conn.Close()
	}
	pw, err := e.cfg.Keys.Decrypt(c.AdminPasswordEnc, clusterAAD(c.ID))
	if err != nil {
		return nil, fmt.Errorf("cluster %s admin password: %w", c.ID, err)
	}
	conn, err := target.Open(ctx, target.Config{Host: c.Host, Port: c.Port, User: c.AdminUser, Password: pw, Database: c.MaintenanceDB, MaxConns: 8})
	if err != nil {
		return nil, err
	}
	e.clusters[c.ID] = clusterConn{conn: conn, updated: c.UpdatedAt}
	return conn, nil
}

func (e *Engine) targetOf(ctx context.Context, clusterID string) (store.Cluster, *target.Cluster, error) {
	c, err := e.store.GetCluster(ctx, clusterID)
	if err != nil {
		return c, nil, err
	}
	t, err := e.target(ctx, c)
	return c, t, err
}

// ---------------------------------------------------------------------------------------
// Decisions

// Kind is which kind of login a decision hands out.
type Kind int

const (
	// KindAdmin is the data table's admin credentials.
	KindAdmin Kind = iota + 1
	// KindRole is one catalog role's own login.
	KindRole
	// KindRoleSet is a wm_set_ login.
	KindRoleSet
)

// Connection is what a worker connects with.
type Connection struct {
	Host     string
	Port     int
	Database string
	User     string
	Password string
	Roles    []string
	Kind     Kind
	// Proxy: Host and Port are roleset's proxy, User a ticket id and Password its secret.
	Proxy bool
	// What was decided, for the audit trail (no secret): the cluster login (User in direct
	// mode; in proxy mode User is the ticket id), who it was decided for (the run's workspace
	// and job, the subject: the viewer's email or the run's owner), and the data table.
	Login, Workspace, JobID, Subject, Datatable string

	// clusterID is the cluster of the decision (the proxy terminates its backends there).
	clusterID string
	// freshUntil, for a set login, is until when its row's last_used_at is known to be
	// within touchEvery of now, which keeps it far from any sweep's cutoff: the cache may
	// hand the login out until then without reading the row (zero: no such bound).
	freshUntil time.Time
}

// Decision is the outcome of the rules, before any credential.
type Decision struct {
	Kind    Kind
	Subject string // the viewer's email, or the run's permissioned_as
	Login   string // the login that would be used
	Roles   []string
	Trace   tenancy.Trace

	dt      store.Datatable
	cluster store.Cluster
	members []store.Role
	run     Run
}

// TokenHash is how a job token is keyed in caches: never the token itself.
func TokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func (e *Engine) run(ctx context.Context, token string) (Run, error) {
	r, err := e.cache.runs.Get(ctx, TokenHash(token), untilTTL(func(ctx context.Context) (Run, error) {
		return e.identity.RunIdentity(ctx, token)
	}))
	if errors.Is(err, ErrUnauthenticated) {
		return r, refuse(CodeUnauthenticated, "job token refused")
	}
	return r, err
}

func (e *Engine) tenancy(ctx context.Context, ws, email string) (tenancy.Identity, error) {
	id, err := e.cache.tenancies.Get(ctx, [2]string{ws, email}, untilTTL(func(ctx context.Context) (tenancy.Identity, error) {
		return e.identity.Tenancy(ctx, ws, email)
	}))
	return id, notMember(err, "viewer")
}

func (e *Engine) ownerTenancy(ctx context.Context, r Run) (tenancy.Identity, error) {
	key := [2]string{r.Workspace, "owner:" + r.PermissionedAs}
	id, err := e.cache.tenancies.Get(ctx, key, untilTTL(func(ctx context.Context) (tenancy.Identity, error) {
		return e.identity.OwnerTenancy(ctx, r)
	}))
	return id, notMember(err, "run's owner")
}

// untilTTL is the loader of an identity lookup: its answer has no expiry of its own, so the
// cache keeps it for its TTL (or until the stream drops it); an error is never kept.
func untilTTL[V any](lookup func(context.Context) (V, error)) revcache.Loader[V] {
	return func(ctx context.Context) (V, time.Time, error) {
		v, err := lookup(ctx)
		return v, time.Time{}, err
	}
}

// notMember turns policy's "not an enabled member" into the refusal saying whose membership
// failed (who: "viewer", "run's owner"); other errors pass as they are.
func notMember(err error, who string) error {
	if errors.Is(err, ErrNotMember) {
		return refuse(CodeNotMember, "the %s is not an enabled member of the workspace", who)
	}
	return err
}

func parseTenants(list []string) []tenancy.Tenant {
	out := make([]tenancy.Tenant, 0, len(list))
	for _, s := range list {
		// Stored tenants were validated on write; one that no longer parses names nobody.
		if t, err := tenancy.ParseTenant(s); err == nil {
			out = append(out, t)
		}
	}
	return out
}

func toTenancyRole(r store.Role, tenants []string) tenancy.Role {
	return tenancy.Role{ID: strconv.FormatInt(r.ID, 10), Name: r.Name, Enabled: r.Usable(), OID: uint32(r.OID), Tenants: parseTenants(tenants)}
}

// Decide applies the rules for a job token and a parsed reference. It reads policy (through
// the cache) and the catalog, and writes nothing.
func (e *Engine) Decide(ctx context.Context, token string, ref datatableref.Ref) (*Decision, error) {
	run, err := e.run(ctx, token)
	if err != nil {
		return nil, err
	}
	dt, err := e.store.GetDatatable(ctx, run.Workspace, ref.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &Error{Code: CodeNotFound, Kind: "datatable", Msg: fmt.Sprintf("no data table %q in this workspace", ref.Name)}
	}
	if err != nil {
		return nil, err
	}
	cluster, err := e.store.GetCluster(ctx, dt.ClusterID)
	if err != nil {
		return nil, err
	}
	d := &Decision{dt: dt, cluster: cluster, run: run}
	if ref.AsViewer {
		return e.decideViewer(ctx, run, d)
	}
	return e.decideNamed(ctx, run, ref.Role, d)
}

func (e *Engine) decideViewer(ctx context.Context, run Run, d *Decision) (*Decision, error) {
	// Only where the data table opted in: its policies must be written to answer per viewer.
	if !d.dt.ViewerAccess {
		return nil, &Error{Code: CodeViewerAccessOff, Field: d.dt.Name,
			Msg: fmt.Sprintf("data table %q does not allow ?as=viewer (its viewer_access is off)", d.dt.Name)}
	}
	// The viewer is the one policy recorded when the run started, nothing else. No viewer
	// (anonymous app, schedule, trigger, AI tool job) is refused, never resolved as the owner.
	if !run.HasViewer || run.ViewerEmail == "" {
		return nil, refuse(CodeNoViewer, "this run has no recorded viewer; as=viewer is refused")
	}
	d.Subject = run.ViewerEmail
	id, err := e.tenancy(ctx, run.Workspace, run.ViewerEmail)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for k := range d.dt.Roles {
		if n, err := strconv.ParseInt(k, 10, 64); err == nil {
			ids = append(ids, n)
		}
	}
	catalog, err := e.store.RolesByIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	byID := map[string]store.Role{}
	var candidates []tenancy.Role
	for _, r := range catalog {
		if r.ClusterID != d.dt.ClusterID {
			continue
		}
		key := strconv.FormatInt(r.ID, 10)
		byID[key] = r
		candidates = append(candidates, toTenancyRole(r, d.dt.Roles[key]))
	}
	if admin, ok := d.dt.Roles[rolename.AdminRole]; ok {
		// Listed so the trace shows it was considered and refused.
		candidates = append(candidates, tenancy.Role{ID: rolename.AdminRole, Name: rolename.AdminRole, Enabled: true, Tenants: parseTenants(admin)})
	}
	matched, trace := tenancy.ViewerRoles(candidates, id)
	d.Trace = trace
	for _, m := range matched {
		r, ok := byID[m.ID]
		if !ok || tenancy.IsAdminRole(m) || !r.Usable() {
			continue // never admin, never a role we did not offer: belt and braces
		}
		d.members = append(d.members, r)
	}
	switch len(d.members) {
	case 0:
		err := refuse(CodeNoRole, "no enabled role of this data table names the viewer")
		err.Trace = trace
		return nil, err
	case 1:
		d.Kind = KindRole
		d.Login = d.members[0].Name
	default:
		d.Kind = KindRoleSet
		oids := make([]uint32, len(d.members))
		for i, m := range d.members {
			oids[i] = uint32(m.OID)
		}
		login, err := tenancy.SetLoginName(e.cfg.InstanceID, oids)
		if err != nil {
			return nil, err
		}
		d.Login = login
	}
	slices.SortFunc(d.members, func(a, b store.Role) int { return int(a.ID - b.ID) })
	for _, m := range d.members {
		d.Roles = append(d.Roles, m.Name)
	}
	return d, nil
}

func (e *Engine) decideNamed(ctx context.Context, run Run, name string, d *Decision) (*Decision, error) {
	d.Subject = run.PermissionedAs
	var role tenancy.Role
	var catalogRole store.Role
	if name == "" {
		switch def := d.dt.DefaultRole; def {
		case rolename.NoneSentinel, "":
			return nil, refuse(CodeNoRole, "this data table has no default role; name one with ?role=")
		case rolename.AdminRole:
			name = rolename.AdminRole
		default:
			id, err := strconv.ParseInt(def, 10, 64)
			if err != nil {
				return nil, refuse(CodeNoRole, "this data table's default role is not valid")
			}
			// A default role must be attached to this data table: a stored default that is
			// not (written before the rule, or the roles map changed around it) is refused,
			// never looked up by id across the cluster.
			if _, attached := d.dt.Roles[def]; !attached {
				return nil, refuse(CodeNoRole, "this data table's default role is not attached to it")
			}
			r, err := e.store.Role(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return nil, refuse(CodeNoRole, "this data table's default role no longer exists")
			}
			if err != nil {
				return nil, err
			}
			name = r.Name
			catalogRole = r
		}
	}
	if rolename.IsAdmin(name) {
		role = tenancy.Role{ID: rolename.AdminRole, Name: rolename.AdminRole, Enabled: true, Tenants: parseTenants(d.dt.Roles[rolename.AdminRole])}
	} else {
		if catalogRole.ID == 0 {
			r, err := e.store.RoleByName(ctx, d.dt.ClusterID, name)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
			// A role is usable through a data table only if it is attached to it. The
			// catalog is per cluster, and the cluster may serve other workspaces' data
			// tables: a role attached elsewhere answers exactly like an unknown name, so a
			// caller learns nothing about other tenants' roles.
			if _, attached := d.dt.Roles[strconv.FormatInt(r.ID, 10)]; err != nil || r.State == store.StateCreating || !attached {
				return nil, &Error{Code: CodeNotFound, Kind: "role", Msg: fmt.Sprintf("no role %q on this data table", name)}
			}
			catalogRole = r
		}
		if catalogRole.ClusterID != d.dt.ClusterID {
			return nil, refuse(CodeNoRole, "the role is not on this data table's cluster")
		}
		role = toTenancyRole(catalogRole, d.dt.Roles[strconv.FormatInt(catalogRole.ID, 10)])
	}
	if !role.Enabled {
		return nil, &Error{Code: CodeRoleDisabled, Msg: fmt.Sprintf("role %q is disabled", role.Name),
			Trace: tenancy.Trace{{RoleID: role.ID, Role: role.Name, Reason: tenancy.ReasonRoleDisabled, Note: "role is disabled"}}}
	}
	owner, err := e.ownerTenancy(ctx, run)
	if err != nil {
		return nil, err
	}
	ok, trace := tenancy.CanUseRole(role, owner)
	d.Trace = trace
	if !ok {
		code := CodeNoRole
		if len(trace) > 0 && trace[0].Reason == tenancy.ReasonRoleDisabled {
			code = CodeRoleDisabled
		}
		err := refuse(code, "the run's owner may not use role %q", role.Name)
		err.Trace = trace
		return nil, err
	}
	if tenancy.IsAdminRole(role) {
		d.Kind = KindAdmin
		d.Login = d.dt.AdminUser
		d.Roles = []string{rolename.AdminRole}
		return d, nil
	}
	d.Kind = KindRole
	d.Login = catalogRole.Name
	d.Roles = []string{catalogRole.Name}
	d.members = []store.Role{catalogRole}
	return d, nil
}

// Resolve decides and returns the credential. The warm path (same token and reference again,
// nothing invalidated) is a map lookup: no policy call, no database read or write. A set
// login's entry lives only while its row is known fresh (Connection.freshUntil), so the cache
// never hands out a login a sweep may have dropped; after that the cold path reads the row.
func (e *Engine) Resolve(ctx context.Context, token string, ref datatableref.Ref) (Connection, error) {
	return e.resolve(ctx, token, ref, true)
}

// resolve is Resolve; with asked false it answers the direct credentials whatever the data
// table's mode (what the proxy connects upstream with), cached under their own key.
func (e *Engine) resolve(ctx context.Context, token string, ref datatableref.Ref, asked bool) (Connection, error) {
	key := TokenHash(token) + "\x00" + ref.String()
	if !asked {
		key = "direct\x00" + key
	}
	if ce, ok := e.cache.conns.Lookup(key); ok {
		return ce.conn, nil
	}
	// Taken before deciding: any event that can change the answer invalidates the connection
	// map, so an answer computed across one is not stored.
	t := e.cache.conns.Begin()
	d, err := e.Decide(ctx, token, ref)
	if err != nil {
		return Connection{}, err
	}
	c, err := e.credential(ctx, d)
	if err != nil {
		return Connection{}, err
	}
	if asked && d.dt.CredentialMode == store.ModeProxy {
		if c, err = e.issueTicket(ctx, token, ref, d, c); err != nil {
			return Connection{}, err
		}
	}
	e.cache.putConn(key, d.dt.Workspace, c, t)
	return c, nil
}

func (e *Engine) credential(ctx context.Context, d *Decision) (Connection, error) {
	c := Connection{Host: d.cluster.Host, Port: d.cluster.Port, Database: d.dt.Database, Roles: d.Roles, Kind: d.Kind, User: d.Login,
		Login: d.Login, Workspace: d.dt.Workspace, JobID: d.run.JobID, Subject: d.Subject, Datatable: d.dt.Name, clusterID: d.cluster.ID}
	var err error
	switch d.Kind {
	case KindAdmin:
		c.Password, err = e.cfg.Keys.Decrypt(d.dt.AdminPasswordEnc, datatableAAD(d.dt.Workspace, d.dt.Name))
	case KindRole:
		c.Password, err = e.cfg.Keys.Decrypt(d.members[0].PasswordEnc, roleAAD(d.members[0].ID))
	case KindRoleSet:
		c.Password, c.freshUntil, err = e.EnsureSetLogin(ctx, d.cluster, d.members, d.dt.Database)
	default:
		err = errors.New("no decision")
	}
	if err != nil {
		return Connection{}, err
	}
	return c, nil
}

// ---------------------------------------------------------------------------------------
// Role-set logins

// EnsureSetLogin returns the password of the set login for members, creating it or taking it
// back if needed, and until when the login's row is known fresh (see Connection.freshUntil).
// See docs/roleset.md for the step-by-step windows.
//
//  1. Fast path: the row exists and is younger than touchEvery (by the database clock) ->
//     decrypt its password. Older: touch it first, and hand it out only if the touch found
//     the row: a sweep that deleted it in between is seen, and the slow path makes it anew.
//     A row younger than touchEvery is at least 3/4 of UnusedAfter from any sweep's cutoff,
//     so a sweep that starts after this hand-out cannot select it.
//  2. Otherwise, in one service-DB transaction holding the login's advisory lock (racers on
//     every replica wait here, then find the winner's row in step 3):
//  3. re-read the row; found -> use it;
//  4. hold the member roles FOR SHARE and check they are all still enabled, with the oids the
//     name was hashed from (a disable waits for us, or we see it and refuse);
//  5. on the cluster, in one transaction: CREATE ROLE ... LOGIN PASSWORD <verifier> IN ROLE
//     <members> with its ownership proof as its comment (or, for a login found without a row
//     whose proof verifies, take it back: new verifier, attributes, settings and memberships
//     reset), verified before it commits; a taken-back login's sessions are then ended; a
//     login whose proof does not verify, or that owns or holds anything, is refused;
//  6. insert the row (encrypted password) and drop any retire-journal entry; commit.
//
// A crash after 5 and before 6 leaves a login no row names, whose password nobody has: the
// next use takes it back with a new password.
func (e *Engine) EnsureSetLogin(ctx context.Context, cl store.Cluster, members []store.Role, database string) (string, time.Time, error) {
	start := time.Now()
	pw, age, err := e.ensureSetLogin(ctx, cl, members, database)
	return pw, start.Add(e.touchEvery() - age), err
}

// ensureSetLogin returns the password and the age of the row's last_used_at when read.
func (e *Engine) ensureSetLogin(ctx context.Context, cl store.Cluster, members []store.Role, database string) (string, time.Duration, error) {
	oids := make([]uint32, len(members))
	ids := make([]int64, len(members))
	oid64 := make([]int64, len(members))
	tm := make([]target.Member, len(members))
	for i, m := range members {
		oids[i], ids[i], oid64[i] = uint32(m.OID), m.ID, m.OID
		tm[i] = target.Member{Name: m.Name, OID: m.OID}
	}
	slices.Sort(ids)
	slices.Sort(oid64)
	login, err := tenancy.SetLoginName(e.cfg.InstanceID, oids)
	if err != nil {
		return "", 0, err
	}
	rowPassword := func(r store.RoleSet) (string, error) {
		if !slices.Equal(r.OIDs, oid64) {
			return "", fmt.Errorf("set login %s: row holds other oids", login)
		}
		return e.cfg.Keys.Decrypt(r.PasswordEnc, roleSetAAD(cl.ID, login))
	}
	r, age, err := e.store.RoleSetAge(ctx, cl.ID, login)
	if err == nil && age > e.touchEvery() {
		e.step(StepEnsureRead)
		r, err = e.store.TouchRoleSet(ctx, cl.ID, login)
		age = 0
		failpoint.Hit("roleset/ensure/touched")
		e.step(StepEnsureTouched)
	}
	if err == nil {
		pw, err := rowPassword(r)
		return pw, age, err
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", 0, err
	}

	tx, err := e.store.BeginEnsure(ctx, cl.ID, login)
	if err != nil {
		return "", 0, err
	}
	e.step(StepEnsureLocked)
	failpoint.Hit("roleset/ensure/locked")
	defer tx.Rollback(context.WithoutCancel(ctx))
	if r, err := tx.RoleSet(ctx, cl.ID, login); err == nil {
		pw, err := rowPassword(r)
		if err != nil {
			return "", 0, err
		}
		return pw, 0, tx.Commit(ctx)
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", 0, err
	}
	ok, err := tx.HoldUsableRoles(ctx, ids, oid64)
	if err != nil {
		return "", 0, err
	}
	if !ok {
		return "", 0, refuse(CodeRoleDisabled, "a role of the viewer's set changed while connecting; retry")
	}
	tc, err := e.target(ctx, cl)
	if err != nil {
		return "", 0, err
	}
	pw := secret.NewPassword()
	tookBack, err := tc.EnsureSetLogin(ctx, login, secret.ScramVerifier(pw, e.cfg.Iterations), tm, database, e.LoginProof(login))
	if err != nil {
		return "", 0, clusterRefusal(login, err)
	}
	if tookBack {
		// The take-back committed on the cluster (new password), its row not yet written.
		failpoint.Hit("roleset/takeback/after-cluster-commit")
		e.cfg.Logger.Info("roleset: took back a set login that had no row", "login", login)
	} else {
		// The login is on the cluster, its row not yet written (docs/roleset.md: the crash
		// window the next use's take-back closes).
		failpoint.Hit("roleset/ensure/after-cluster-commit")
	}
	enc, err := e.cfg.Keys.Encrypt(pw, roleSetAAD(cl.ID, login))
	if err != nil {
		return "", 0, err
	}
	if err := tx.InsertRoleSet(ctx, store.RoleSet{ClusterID: cl.ID, Login: login, InstanceID: e.cfg.InstanceID,
		RoleIDs: ids, OIDs: oid64, PasswordEnc: enc}); err != nil {
		return "", 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", 0, err
	}
	failpoint.Hit("roleset/ensure/committed") // the row is written, the caller never told
	return pw, 0, nil
}

// RetireSetLogin retires one login: (1) under the login's session lock, delete its row and
// write the retire journal in one commit; (2) NOLOGIN; (3) end its sessions (twice); (4) DROP
// ROLE; (5) delete the journal entry. A crash anywhere leaves the journal entry, which the
// reconciler finishes; the row is gone from step 1, so no one is handed the login again.
func (e *Engine) RetireSetLogin(ctx context.Context, clusterID, login, reason string, try bool) (bool, error) {
	lock, ok, err := e.store.LockLogin(ctx, clusterID, login, try)
	if err != nil || !ok {
		return false, err
	}
	defer lock.Unlock()
	return e.retireLocked(ctx, lock, clusterID, login, reason, nil)
}

func (e *Engine) retireLocked(ctx context.Context, lock *store.LoginLock, clusterID, login, reason string, unusedSince *time.Time) (bool, error) {
	moved, err := lock.MoveToJournal(ctx, e.cfg.InstanceID, reason, unusedSince)
	if err != nil {
		return false, err
	}
	if moved {
		failpoint.Hit("roleset/retire/journaled")
		e.step(StepRetireMoved)
	}
	if !moved {
		pending, err := lock.InJournal(ctx)
		if err != nil || !pending {
			return false, err // kept (used since) or finished by someone else
		}
	}
	e.DropConnections()
	_, tc, err := e.targetOf(ctx, clusterID)
	if err != nil {
		return false, err
	}
	if err := tc.RetireSetLogin(ctx, login); err != nil {
		return false, err
	}
	failpoint.Hit("roleset/retire/dropped") // the login is gone, its journal entry not
	return true, lock.FinishJournal(ctx)
}
