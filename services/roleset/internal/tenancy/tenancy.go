package tenancy

import (
	"cmp"
	"slices"
	"strings"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

// Folder is a folder the identity can reach. Write is true for writers and owners.
type Folder struct {
	Name  string
	Write bool
}

// Identity is who a decision is made for, as policy's ResolveTenancy returns it: the run's
// recorded viewer for ?as=viewer, otherwise the run's owner. It must be a member of the
// governing workspace (policy refuses non-members); an Identity with an empty Username names
// nobody, not even through *.
type Identity struct {
	Username string
	Groups   []string
	Folders  []Folder
	// IsAdmin is a workspace admin of the governing workspace. It lets CanUseRole pass
	// every role and gives nothing in ViewerRoles.
	IsAdmin bool
}

// Role is a catalog role as the store holds it, with the tenants one data table gives it.
// The admin connection is passed as a Role whose ID or Name is rolename.AdminRole, with
// Enabled true.
type Role struct {
	ID      string
	Name    string
	Enabled bool
	// OID is the role's oid on the cluster (stable across renames).
	OID     uint32
	Tenants []Tenant
}

// Reason says why a role was taken or left out. Stable identifiers; ROLE_DISABLED maps to
// ERROR_REASON_ROLE_DISABLED and NOT_A_TENANT to ERROR_REASON_NO_ROLE in the API.
type Reason string

const (
	// ReasonTenant: a tenant entry names the identity (TraceEntry.Tenant says which).
	ReasonTenant Reason = "TENANT"
	// ReasonWorkspaceAdmin: CanUseRole only; a workspace admin may use every enabled role.
	ReasonWorkspaceAdmin Reason = "WORKSPACE_ADMIN"
	// ReasonRoleDisabled: a disabled role is never used, and never replaced by another.
	ReasonRoleDisabled Reason = "ROLE_DISABLED"
	// ReasonAdminRole: ViewerRoles only; admin owns the tables and bypasses row-level
	// security, so it is never one of the viewer's roles, whatever its tenants say.
	ReasonAdminRole Reason = "ADMIN_ROLE"
	// ReasonNotTenant: no tenant entry names the identity.
	ReasonNotTenant Reason = "NOT_A_TENANT"
	// ReasonInvalidName: the catalog holds a name rolename.Validate refuses (e.g. imported
	// from an older catalog); it is never granted or connected as.
	ReasonInvalidName Reason = "INVALID_NAME"
	// ReasonNoIdentity: the identity has no username, so nothing names it.
	ReasonNoIdentity Reason = "NO_IDENTITY"
)

// TraceEntry is one step of a decision, for ExplainConnection.
type TraceEntry struct {
	RoleID string
	Role   string // the role's name
	OID    uint32
	// Tenant is the entry that named the identity (u/alice, g/sales, f/finance, *), or "".
	Tenant  string
	Matched bool
	Reason  Reason
	Note    string
}

// Trace lists the roles considered, in the order they were decided (by oid for ViewerRoles).
type Trace []TraceEntry

// Names reports whether the tenant entry names the identity. A folder entry names writers
// (and owners) of the folder only: Windmill's folder tenants carried folder_access with a
// missing value meaning write, and the tenant lists here carry no access level, so the
// narrower reading is kept. Comparisons are exact (case-sensitive), as Windmill's are.
func (t Tenant) Names(id Identity) bool {
	if id.Username == "" {
		return false
	}
	switch t.Kind {
	case TenantEveryone:
		return t.Name == ""
	case TenantUser:
		return t.Name != "" && t.Name == id.Username
	case TenantGroup:
		return t.Name != "" && slices.Contains(id.Groups, t.Name)
	case TenantFolder:
		return t.Name != "" && slices.ContainsFunc(id.Folders, func(f Folder) bool {
			return f.Name == t.Name && f.Write
		})
	}
	return false
}

// namingTenant returns the first tenant entry of r, in list order, that names id.
func namingTenant(r Role, id Identity) (Tenant, bool) {
	for _, t := range r.Tenants {
		if t.Names(id) {
			return t, true
		}
	}
	return Tenant{}, false
}

// IsAdminRole reports whether r is the admin connection (by id or by name, any case: a
// catalog role can never be called admin, so a match is treated as admin, never as a role).
func IsAdminRole(r Role) bool {
	return r.ID == rolename.AdminRole || strings.EqualFold(r.Name, rolename.AdminRole)
}

func entry(r Role, matched bool, reason Reason, tenant, note string) TraceEntry {
	return TraceEntry{RoleID: r.ID, Role: r.Name, OID: r.OID, Tenant: tenant, Matched: matched, Reason: reason, Note: note}
}

// ViewerRoles returns the enabled roles whose tenants name the viewer, sorted by oid (then
// id), and the trace of every role considered. The admin role is never returned, and the
// viewer being a workspace admin adds nothing: only a tenant list naming the viewer counts.
// An empty result means the viewer reaches no role (ERROR_REASON_NO_ROLE); the caller must
// refuse, never fall back to the default role or the owner.
func ViewerRoles(roles []Role, id Identity) ([]Role, Trace) {
	sorted := slices.Clone(roles)
	slices.SortStableFunc(sorted, func(a, b Role) int {
		return cmp.Or(cmp.Compare(a.OID, b.OID), cmp.Compare(a.ID, b.ID))
	})
	var out []Role
	trace := make(Trace, 0, len(sorted))
	for _, r := range sorted {
		switch {
		case IsAdminRole(r):
			trace = append(trace, entry(r, false, ReasonAdminRole, "",
				"admin owns the tables and bypasses row-level security; never a viewer role"))
		case !r.Enabled:
			trace = append(trace, entry(r, false, ReasonRoleDisabled, "", "role is disabled"))
		case rolename.Validate(r.Name) != nil:
			trace = append(trace, entry(r, false, ReasonInvalidName, "", "role name is not valid"))
		case id.Username == "":
			trace = append(trace, entry(r, false, ReasonNoIdentity, "", "no viewer username"))
		default:
			if t, ok := namingTenant(r, id); ok {
				out = append(out, r)
				trace = append(trace, entry(r, true, ReasonTenant, t.String(), "tenant entry names the viewer"))
			} else {
				note := "no tenant entry names the viewer"
				if id.IsAdmin {
					note += " (workspace admin gives no reach as viewer)"
				}
				trace = append(trace, entry(r, false, ReasonNotTenant, "", note))
			}
		}
	}
	return out, trace
}

// CanUseRole reports whether id may connect as role (a role named in the reference, or the
// data table's default role). A disabled role is never usable, by anyone, and is reported as
// ReasonRoleDisabled so the caller refuses instead of falling back. Otherwise the role is
// usable if its tenants name id, or if id is a workspace admin (admins may use every role,
// admin included). A catalog role with an invalid name is never usable.
func CanUseRole(role Role, id Identity) (bool, Trace) {
	if !role.Enabled {
		return false, Trace{entry(role, false, ReasonRoleDisabled, "", "role is disabled")}
	}
	if !IsAdminRole(role) && rolename.Validate(role.Name) != nil {
		return false, Trace{entry(role, false, ReasonInvalidName, "", "role name is not valid")}
	}
	if id.Username == "" {
		return false, Trace{entry(role, false, ReasonNoIdentity, "", "no username")}
	}
	if t, ok := namingTenant(role, id); ok {
		return true, Trace{entry(role, true, ReasonTenant, t.String(), "tenant entry names the caller")}
	}
	if id.IsAdmin {
		return true, Trace{entry(role, true, ReasonWorkspaceAdmin, "", "workspace admins may use every role")}
	}
	return false, Trace{entry(role, false, ReasonNotTenant, "", "no tenant entry names the caller")}
}
