package engine

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
	"github.com/millwright/millwright/services/roleset/internal/store"
)

// The installation's configuration: clusters, data tables and their permissions. Every write
// here encrypts its secret under an AAD naming its row (so a ciphertext copied onto another row
// does not decrypt) and drops the cached connections once it commits, so that the next resolve
// reads the new registration: the cache never hands out a login the configuration no longer
// grants.

// ClusterSpec is a cluster registration as an administrator sends it, password in clear.
type ClusterSpec struct {
	ID, Host, MaintenanceDB, AdminUser, AdminPassword string
	Port                                              int
}

// UpsertCluster registers or replaces a target cluster.
func (e *Engine) UpsertCluster(ctx context.Context, c ClusterSpec) (store.Cluster, error) {
	enc, err := e.cfg.Keys.Encrypt(c.AdminPassword, clusterAAD(c.ID))
	if err != nil {
		return store.Cluster{}, err
	}
	out, err := e.store.UpsertCluster(ctx, store.Cluster{ID: c.ID, Host: c.Host, Port: c.Port,
		MaintenanceDB: c.MaintenanceDB, AdminUser: c.AdminUser, AdminPasswordEnc: enc})
	if err != nil {
		return store.Cluster{}, err
	}
	e.DropConnections()
	return out, nil
}

// DatatableSpec is a data table registration as an administrator sends it, password in clear.
type DatatableSpec struct {
	Workspace, Name, ClusterID, Database, AdminUser, AdminPassword, DefaultRole string
	// ViewerAccess opts in to ?as=viewer; nil keeps the stored value (off for a new data table).
	ViewerAccess *bool
	// CredentialMode is store.ModeDirect or store.ModeProxy; "" keeps the stored mode (proxy
	// for a new data table).
	CredentialMode string
}

// UpsertDatatable registers or replaces a data table (its permissions are kept).
func (e *Engine) UpsertDatatable(ctx context.Context, d DatatableSpec) (store.Datatable, error) {
	enc, err := e.cfg.Keys.Encrypt(d.AdminPassword, datatableAAD(d.Workspace, d.Name))
	if err != nil {
		return store.Datatable{}, err
	}
	out, err := e.store.UpsertDatatable(ctx, store.Datatable{Workspace: d.Workspace, Name: d.Name, ClusterID: d.ClusterID,
		Database: d.Database, AdminUser: d.AdminUser, AdminPasswordEnc: enc, DefaultRole: d.DefaultRole,
		CredentialMode: d.CredentialMode}, d.ViewerAccess)
	if errors.Is(err, store.ErrDefaultNotAttached) {
		return store.Datatable{}, errDefaultNotAttached()
	}
	if err != nil {
		return store.Datatable{}, err
	}
	e.DropConnections()
	return out, nil
}

func errDefaultNotAttached() *Error {
	return invalid("default_role", "default_role_attached",
		`the default role must be attached to the data table (a key of its roles), "admin" or "$none"`)
}

// SetPermissions replaces a data table's default role and its roles (role id or "admin" ->
// tenants). Keys are role ids of ready roles on the data table's cluster, or "admin"; the
// default role is "admin", "$none" or one of the keys: a role is usable through a data table
// only if it is attached to it.
func (e *Engine) SetPermissions(ctx context.Context, workspace, name, defaultRole string, roles map[string][]string) (store.Datatable, error) {
	clean := make(map[string][]string, len(roles))
	var ids []int64
	for _, k := range slices.Sorted(maps.Keys(roles)) {
		if k != rolename.AdminRole {
			id, err := strconv.ParseInt(k, 10, 64)
			if err != nil || id <= 0 {
				return store.Datatable{}, invalid("roles", "role_key", `roles keys must be role ids or "admin"`)
			}
			ids = append(ids, id)
		}
		clean[k] = slices.Clone(roles[k])
	}
	if defaultRole != rolename.AdminRole && defaultRole != rolename.NoneSentinel {
		if _, ok := clean[defaultRole]; !ok {
			return store.Datatable{}, errDefaultNotAttached()
		}
	}
	d, err := e.store.SetPermissions(ctx, workspace, name, defaultRole, clean, ids)
	switch {
	case errors.Is(err, store.ErrDefaultNotAttached):
		return store.Datatable{}, errDefaultNotAttached()
	case errors.Is(err, store.ErrUnknownRole):
		return store.Datatable{}, invalid("roles", "unknown_role", "a role id is not a ready role of the data table's cluster")
	case err != nil:
		return store.Datatable{}, err
	}
	e.DropConnections()
	return d, nil
}

// The plain reads of the configuration (no secret leaves: the encrypted passwords are not
// rendered by the api layer).

// ListClusters lists at most limit registered clusters after the id after.
func (e *Engine) ListClusters(ctx context.Context, f store.ClusterFilter, after string, limit int) ([]store.Cluster, error) {
	return e.store.ListClusters(ctx, f, after, limit)
}

// Cluster reads one registered cluster.
func (e *Engine) Cluster(ctx context.Context, id string) (store.Cluster, error) {
	return e.store.GetCluster(ctx, id)
}

// Role reads one catalog role.
func (e *Engine) Role(ctx context.Context, id int64) (store.Role, error) {
	return e.store.Role(ctx, id)
}

// ListRoles lists at most limit catalog roles of a cluster after the name after.
func (e *Engine) ListRoles(ctx context.Context, f store.RoleFilter, after string, limit int) ([]store.Role, error) {
	return e.store.ListRoles(ctx, f, after, limit)
}

// Datatable reads a data table and its permissions.
func (e *Engine) Datatable(ctx context.Context, workspace, name string) (store.Datatable, error) {
	return e.store.GetDatatable(ctx, workspace, name)
}

// ListDatatables lists at most limit of a workspace's data tables after the name after.
func (e *Engine) ListDatatables(ctx context.Context, f store.DatatableFilter, after string, limit int) ([]store.Datatable, error) {
	return e.store.ListDatatables(ctx, f, after, limit)
}
