package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/millwright/millwright/pkg/failpoint"
	"github.com/millwright/millwright/services/roleset/internal/rolename"
	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/target"
)

func validateRoleName(field, name string) error {
	if err := rolename.Validate(name); err != nil {
		var re *rolename.Error
		if errors.As(err, &re) && (re.Rule == rolename.RuleReservedName || re.Rule == rolename.RuleReservedPrefix) {
			return &Error{Code: CodeReservedName, Field: field, Rule: re.Rule, Msg: err.Error()}
		}
		rule := "role_name"
		if re != nil {
			rule = re.Rule
		}
		return invalid(field, rule, "%s", err.Error())
	}
	return nil
}

// CreateRole creates a catalog role: (1) row in state creating (own commit), (2) CREATE ROLE
// ... LOGIN PASSWORD <verifier> with its ownership proof as its comment, on the cluster, (3)
// row ready with the oid and the encrypted password. A crash after 1 or 2 leaves a creating
// row that a retry of the same CreateRole resumes (the ownership proof tells our half-made
// role from someone else's).
//
// All three steps run under one lock of (cluster, name) in the service DB, held from before
// the row is read until the ready row commits. Without it, concurrent calls of one name (a
// client retry while the first is in flight) all resumed the same creating row: a racer's
// take-back ALTER ... PASSWORD could land after the first call's CREATE, whose MarkRoleReady
// then stored a password the cluster no longer accepted; or a racer that lost the CREATE
// deleted the shared row, leaving a marked role no row names. Under the lock a racer waits,
// then re-reads the row: ready -> AlreadyExists; still creating (the holder failed or
// crashed) -> it resumes the creation itself.
func (e *Engine) CreateRole(ctx context.Context, clusterID, name string) (store.Role, error) {
	if err := validateRoleName("name", name); err != nil {
		return store.Role{}, err
	}
	_, tc, err := e.targetOf(ctx, clusterID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Role{}, &Error{Code: CodeNotFound, Kind: "cluster", Msg: "no such cluster"}
	}
	if err != nil {
		return store.Role{}, err
	}
	c, err := e.store.BeginRoleCreation(ctx, clusterID, name)
	if err != nil {
		return store.Role{}, err
	}
	defer c.End()
	r, _, err := c.InsertCreatingRole(ctx, e.cfg.InstanceID)
	if errors.Is(err, store.ErrAlreadyExists) {
		return r, roleTaken(r)
	}
	if err != nil {
		return r, err
	}
	failpoint.Hit("roleset/role-create/row-creating")
	pw := secret.NewPassword()
	oid, err := tc.CreateRole(ctx, name, secret.ScramVerifier(pw, e.cfg.Iterations), e.roleProof(r.ID))
	if errors.Is(err, target.ErrRoleExists) || errors.Is(err, target.ErrNotOurs) {
		// Not ours: forget the creation. (A tampered role of ours keeps its creating row, so a
		// retry after the cluster is cleaned resumes it under the same id, which its proof binds.)
		if err := c.DeleteCreatingRole(ctx, r.ID); err != nil {
			e.cfg.Logger.Warn("roleset: forgetting a refused creation failed", "role_id", r.ID, "err", err)
		}
	}
	if errors.Is(err, target.ErrRoleExists) {
		// Our own row of the name was the creating one, forgotten above: the cluster's role
		// is someone else's.
		return r, roleNotInCatalog(name)
	}
	if err != nil {
		return r, clusterRefusal(name, err)
	}
	failpoint.Hit("roleset/role-create/cluster-created") // on the cluster, the row still creating
	enc, err := e.cfg.Keys.Encrypt(pw, roleAAD(r.ID))
	if err != nil {
		return r, err
	}
	r, err = c.MarkRoleReady(ctx, r.ID, oid, enc)
	if err == nil {
		failpoint.Hit("roleset/role-create/ready")
	}
	return r, err
}

func (e *Engine) readyRole(ctx context.Context, id int64) (store.Role, *target.Cluster, error) {
	r, err := e.store.Role(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.State != store.StateReady) {
		return r, nil, &Error{Code: CodeNotFound, Kind: "role", Msg: "no such role"}
	}
	if err != nil {
		return r, nil, err
	}
	_, tc, err := e.targetOf(ctx, r.ClusterID)
	return r, tc, err
}

// SetRoleEnabled enables or disables a role.
//
// Disable: (1) catalog enabled=false (waits for in-flight set-login creations holding the
// role; emits "role"), (2) the role's own login NOLOGIN and its sessions ended, (3) every set
// login holding it retired. Enable: (1) LOGIN on the cluster, (2) catalog enabled=true: the
// catalog is the truth, so a crash between leaves a state the reconciler brings back to it.
func (e *Engine) SetRoleEnabled(ctx context.Context, id int64, enabled bool) (store.Role, error) {
	r, tc, err := e.readyRole(ctx, id)
	if err != nil {
		return r, err
	}
	if enabled {
		if err := tc.SetRoleLogin(ctx, r.Name, true); err != nil {
			return r, err
		}
		failpoint.Hit("roleset/role-enable/cluster-login") // LOGIN on the cluster, catalog still disabled
		r, err = e.store.SetRoleEnabled(ctx, id, true)
		e.DropConnections()
		return r, err
	}
	if r, err = e.store.SetRoleEnabled(ctx, id, false); err != nil {
		return r, err
	}
	failpoint.Hit("roleset/role-disable/catalog") // disabled in the catalog, not yet on the cluster
	e.DropConnections()
	return r, e.retireRole(ctx, r, tc)
}

// retireRole makes a disabled role unreachable: own login NOLOGIN + sessions ended, and every
// set login holding it retired. Idempotent (the reconciler calls it again after a crash).
func (e *Engine) retireRole(ctx context.Context, r store.Role, tc *target.Cluster) error {
	if err := tc.SetRoleLogin(ctx, r.Name, false); err != nil {
		return err
	}
	failpoint.Hit("roleset/role-disable/nologin") // own login NOLOGIN, set logins not yet retired
	sets, err := e.store.RoleSetsHolding(ctx, r.ID)
	if err != nil {
		return err
	}
	for _, s := range sets {
		if _, err := e.RetireSetLogin(ctx, s.ClusterID, s.Login, fmt.Sprintf("role %d disabled", r.ID), false); err != nil {
			return err
		}
	}
	return nil
}

// RenameRole renames on the cluster, then in the catalog. Nothing is retired: set logins are
// keyed by oid. A crash between the two is repaired by the reconciler, which reads names by
// oid.
func (e *Engine) RenameRole(ctx context.Context, id int64, name string) (store.Role, error) {
	if err := validateRoleName("name", name); err != nil {
		return store.Role{}, err
	}
	r, tc, err := e.readyRole(ctx, id)
	if err != nil || r.Name == name {
		return r, err
	}
	if err := tc.RenameRole(ctx, r.Name, name); errors.Is(err, target.ErrRoleExists) {
		if other, err := e.store.RoleByName(ctx, r.ClusterID, name); err == nil {
			return r, roleTaken(other)
		}
		return r, roleNotInCatalog(name)
	} else if err != nil {
		return r, err
	}
	r, err = e.store.RenameRole(ctx, id, name)
	e.DropConnections()
	return r, err
}

// DeleteRole: (1) catalog state deleting + removed from every data table's permissions (one
// commit), (2) set logins holding it retired, own sessions ended, (3) on the cluster: objects
// reassigned to the admin, privileges dropped, DROP ROLE under the role's lock, (4) catalog row
// deleted. The reconciler resumes a deleting row.
func (e *Engine) DeleteRole(ctx context.Context, id int64) error {
	r, err := e.store.MarkRoleDeleting(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Code: CodeNotFound, Kind: "role", Msg: "no such role"}
	}
	if err != nil {
		return err
	}
	failpoint.Hit("roleset/role-delete/marked")
	e.DropConnections()
	return e.finishDelete(ctx, r)
}

func (e *Engine) finishDelete(ctx context.Context, r store.Role) error {
	_, tc, err := e.targetOf(ctx, r.ClusterID)
	if err != nil {
		return err
	}
	if r.OID != 0 {
		if err := e.retireRole(ctx, r, tc); err != nil && !target.IsMissingRole(err) {
			return err
		}
		failpoint.Hit("roleset/role-delete/retired")
		// Missing: another deleter (a racing DeleteRole, another replica's reconciler) dropped
		// it between DropRole's look-up and its statements; what is left is this row.
		if err := tc.DropRole(ctx, r.OID, e.catalogRoleProof(r.ID)); err != nil && !errors.Is(err, target.ErrNotOurs) && !target.IsMissingRole(err) {
			return err
		}
		failpoint.Hit("roleset/role-delete/dropped") // gone from the cluster, the row not yet deleted
	}
	return e.store.DeleteRoleRow(ctx, r.ID)
}

// ---------------------------------------------------------------------------------------
// Sweep and reconcile

// SweepResult counts what a sweep did.
type SweepResult struct {
	Dropped int64
	Resumed int64
}

// Sweep finishes interrupted retires, reconciles the catalog with the clusters, and drops this
// instance's set logins unused for UnusedAfter, in batches. Safe on every replica at once:
// each login is handled under its lock, taken with try (a login another replica is handling is
// skipped), and re-checked under it.
func (e *Engine) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	var errs []error
	entries, err := e.store.RetiringEntries(ctx, e.cfg.InstanceID, e.cfg.SweepBatch)
	if err != nil {
		return res, err
	}
	if len(entries) > 0 {
		failpoint.Hit("roleset/sweep/journal-listed")
	}
	for _, j := range entries {
		done, err := e.RetireSetLogin(ctx, j.ClusterID, j.Login, j.Reason, true)
		if err != nil {
			errs = append(errs, err)
		}
		if done {
			res.Resumed++
		}
	}
	if err := e.Reconcile(ctx); err != nil {
		errs = append(errs, err)
	}
	// The cutoff is taken from the database clock, the clock last_used_at is written with.
	now, err := e.store.Now(ctx)
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	cutoff := now.Add(-e.cfg.UnusedAfter)
	for {
		rows, err := e.store.UnusedRoleSets(ctx, e.cfg.InstanceID, cutoff, e.cfg.SweepBatch)
		if err != nil {
			return res, errors.Join(append(errs, err)...)
		}
		e.step(StepSweepListed)
		progress := false
		for _, r := range rows {
			lock, ok, err := e.store.LockLogin(ctx, r.ClusterID, r.Login, true)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !ok {
				continue
			}
			e.step(StepSweepLocked)
			failpoint.Hit("roleset/sweep/locked")
			done, err := e.retireLocked(ctx, lock, r.ClusterID, r.Login, "unused", &cutoff)
			lock.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if done {
				res.Dropped++
				progress = true
			}
		}
		if len(rows) < e.cfg.SweepBatch || !progress {
			break
		}
	}
	return res, errors.Join(errs...)
}

// Reconcile brings the clusters back to the catalog after an interrupted change: deleting
// roles are finished, disabled roles made unreachable (own login NOLOGIN, set logins holding
// them retired), enabled roles allowed to log in, and names re-read by oid after a rename.
// It goes by this instance's catalog rows only, never by names found on a cluster nor by
// another instance's rows in a shared service database (which it would otherwise finish
// deleting or retire). A row made before instances were recorded is claimed first, and only
// when the role's ownership proof on the cluster (or its pre-proof marker) says it is ours.
func (e *Engine) Reconcile(ctx context.Context) error {
	roles, err := e.store.InstanceRoles(ctx, e.cfg.InstanceID)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range roles {
		if r.InstanceID == "" {
			ok, err := e.claim(ctx, r)
			if err != nil {
				errs = append(errs, fmt.Errorf("role %d: %w", r.ID, err))
			}
			if !ok {
				continue
			}
		}
		if err := e.reconcileRole(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("role %d: %w", r.ID, err))
		}
	}
	return errors.Join(errs...)
}

// claim records an unclaimed catalog role as this instance's when its role on the cluster
// carries this instance's ownership proof (or, being older, its plain marker: such rows
// predate proofs); otherwise the row is left to whoever owns it.
func (e *Engine) claim(ctx context.Context, r store.Role) (bool, error) {
	if r.OID == 0 {
		return false, nil // never created, or its oid was lost: nothing proves it ours
	}
	_, tc, err := e.targetOf(ctx, r.ClusterID)
	if err != nil {
		return false, err
	}
	name, ours, err := tc.RoleName(ctx, r.OID, e.catalogRoleProof(r.ID))
	if err != nil || name == "" || !ours {
		return false, err
	}
	return e.store.ClaimRole(ctx, r.ID, e.cfg.InstanceID)
}

func (e *Engine) reconcileRole(ctx context.Context, r store.Role) error {
	switch r.State {
	case store.StateDeleting:
		return e.finishDelete(ctx, r)
	case store.StateCreating:
		return nil // resumed by a retry of CreateRole
	}
	_, tc, err := e.targetOf(ctx, r.ClusterID)
	if err != nil {
		return err
	}
	name, ours, err := tc.RoleName(ctx, r.OID, e.catalogRoleProof(r.ID))
	if err != nil {
		return err
	}
	if name == "" || !ours {
		e.cfg.Logger.Warn("roleset: catalog role missing on its cluster", "role_id", r.ID)
		return nil
	}
	if name != r.Name && rolename.Validate(name) == nil {
		if r, err = e.store.RenameRole(ctx, r.ID, name); err != nil {
			return err
		}
		e.DropConnections()
	}
	canLogin, err := tc.CanLogin(ctx, r.OID)
	if err != nil {
		return err
	}
	if !r.Enabled {
		sets, err := e.store.RoleSetsHolding(ctx, r.ID)
		if err != nil {
			return err
		}
		if canLogin || len(sets) > 0 {
			return e.retireRole(ctx, r, tc)
		}
		return nil
	}
	if !canLogin {
		// r was read before this role was looked at on the cluster; another replica may have
		// disabled it since (catalog, then NOLOGIN). Re-check under the row, held across the
		// LOGIN, so a stale read never gives a disabled role its login back.
		_, err := e.store.WhileRoleEnabled(ctx, r.ID, func() error { return tc.SetRoleLogin(ctx, r.Name, true) })
		return err
	}
	return nil
}
