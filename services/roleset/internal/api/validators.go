package api

import (
	"slices"

	"github.com/millwright/millwright/pkg/errs"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/paging"
	"github.com/millwright/millwright/pkg/validate"
	"github.com/millwright/millwright/services/roleset/internal/datatableref"
	"github.com/millwright/millwright/services/roleset/internal/rolename"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Limits of SetPermissions (stated in roleset.proto).
const (
	maxPermissionRoles = 1000 // entries of the roles map
	maxTenants         = 1000 // tenants of one role
)

// datatableName is the data-table name rule, datatableref's (the name inside a reference obeys it).
func datatableName(field, v string) error {
	if err := validate.Required(field, v); err != nil {
		return err
	}
	if !datatableref.ValidName(v) {
		return errs.InvalidField(field, "datatable_name", field+" must be 1-63 characters of [A-Za-z0-9_-]")
	}
	return nil
}

// pageSize is every List's page_size rule (its page_token is checked by the handler, which
// knows the filters the token must have been issued for).
func pageSize(m paging.Request) error {
	_, err := paging.Size(m.GetPageSize())
	return err
}

// Validators returns the registry with one validator per request message.
func Validators() *validate.Registry {
	r := validate.NewRegistry()
	validate.Add(r, func(m *rolesetv1.UpsertClusterRequest) error {
		return validate.First(
			validate.ClusterID("cluster_id", m.GetClusterId()),
			validate.Host("host", m.GetHost()),
			validate.Min("port", m.GetPort(), 1), validate.Max("port", m.GetPort(), 65535),
			validate.Identifier("maintenance_database", m.GetMaintenanceDatabase()),
			validate.Identifier("admin_user", m.GetAdminUser()),
			validate.Required("admin_password", m.GetAdminPassword()),
			validate.MaxLen("admin_password", m.GetAdminPassword(), 1024))
	})
	validate.Add(r, func(m *rolesetv1.ListClustersRequest) error { return pageSize(m) })
	validate.Add(r, func(m *rolesetv1.GetClusterRequest) error { return validate.ClusterID("cluster_id", m.GetClusterId()) })
	validate.Add(r, func(m *rolesetv1.CreateRoleRequest) error {
		// The name's own rules (reserved names and prefixes) are checked by core, which
		// answers RESERVED_NAME; here only presence.
		return validate.First(validate.ClusterID("cluster_id", m.GetClusterId()),
			validate.Required("name", m.GetName()), validate.MaxLen("name", m.GetName(), 63))
	})
	validate.Add(r, func(m *rolesetv1.UpdateRoleRequest) error {
		return validate.Required("role_id", m.GetRoleId())
	})
	validate.Add(r, func(m *rolesetv1.DeleteRoleRequest) error { return validate.Required("role_id", m.GetRoleId()) })
	validate.Add(r, func(m *rolesetv1.ListRolesRequest) error {
		return validate.First(validate.ClusterID("cluster_id", m.GetClusterId()), pageSize(m),
			validate.MaxLen("name_prefix", m.GetNamePrefix(), 63))
	})
	validate.Add(r, func(m *rolesetv1.GetRoleRequest) error {
		_, err := parseRoleID(m.GetRoleId())
		return err
	})
	validate.Add(r, func(*rolesetv1.SweepRequest) error { return nil })
	validate.Add(r, func(m *rolesetv1.UpsertDatatableRequest) error {
		return validate.First(
			validate.Workspace("workspace", m.GetWorkspace()), datatableName("name", m.GetName()),
			validate.ClusterID("cluster_id", m.GetClusterId()),
			validate.Identifier("database", m.GetDatabase()),
			validate.Identifier("admin_user", m.GetAdminUser()),
			validate.Required("admin_password", m.GetAdminPassword()),
			validate.MaxLen("admin_password", m.GetAdminPassword(), 1024),
			checkDefaultRole(m.GetDefaultRole()),
			// An unknown mode is refused, never read as "keep the stored one".
			validate.OneOf("credential_mode", m.GetCredentialMode(), rolesetv1.CredentialMode_CREDENTIAL_MODE_UNSPECIFIED,
				rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT, rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY))
	})
	validate.Add(r, func(m *rolesetv1.SetPermissionsRequest) error {
		if err := validate.First(validate.Workspace("workspace", m.GetWorkspace()), datatableName("name", m.GetName()),
			checkDefaultRole(m.GetDefaultRole()),
			validate.MaxEntries("roles", m.GetRoles(), maxPermissionRoles)); err != nil {
			return err
		}
		// In key order, so the same request is always refused for the same entry.
		keys := make([]string, 0, len(m.GetRoles()))
		for k := range m.GetRoles() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := m.GetRoles()[k]
			if k != rolename.AdminRole {
				if _, err := parseRoleID(k); err != nil {
					return err
				}
			}
			if err := validate.MaxItems("roles."+k+".tenants", v.GetTenants(), maxTenants); err != nil {
				return err
			}
			if _, err := tenancy.ParseTenants(v.GetTenants()); err != nil {
				return errs.InvalidField("roles."+k+".tenants", "tenant", err.Error())
			}
		}
		return nil
	})
	validate.Add(r, func(m *rolesetv1.GetPermissionsRequest) error {
		return validate.First(validate.Workspace("workspace", m.GetWorkspace()), datatableName("name", m.GetName()))
	})
	validate.Add(r, func(m *rolesetv1.GetDatatableRequest) error {
		return validate.First(validate.Workspace("workspace", m.GetWorkspace()), datatableName("name", m.GetName()))
	})
	validate.Add(r, func(m *rolesetv1.ListDatatablesRequest) error {
		var cluster error
		if m.GetClusterId() != "" {
			cluster = validate.ClusterID("cluster_id", m.GetClusterId())
		}
		return validate.First(validate.Workspace("workspace", m.GetWorkspace()), pageSize(m), cluster,
			validate.OneOf("credential_mode", m.GetCredentialMode(), rolesetv1.CredentialMode_CREDENTIAL_MODE_UNSPECIFIED,
				rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT, rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY))
	})
	// Reference parsing is the handler's (it answers MALFORMED_REFERENCE with the parser's rule).
	validate.Add(r, func(*rolesetv1.ResolveConnectionRequest) error { return nil })
	validate.Add(r, func(*rolesetv1.ExplainConnectionRequest) error { return nil })
	validate.Add(r, func(m *rolesetv1.WatchRequest) error {
		return validate.First(validate.MaxItems("kinds", m.GetKinds(), 32),
			validate.Each("kinds", m.GetKinds(), func(f, k string) error { return validate.MaxLen(f, k, 50) }))
	})
	return r
}
