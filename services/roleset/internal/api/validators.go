package api

import (
	"regexp"

	"github.com/millwright/millwright/pkg/errs"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/validate"
	"github.com/millwright/millwright/services/roleset/internal/dtref"
	"github.com/millwright/millwright/services/roleset/internal/rolename"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

var (
	idRe    = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)
	pgIdent = regexp.MustCompile(`^[A-Za-z0-9_$-]{1,63}$`)
	hostRe  = regexp.MustCompile(`^[A-Za-z0-9.:_-]{1,253}$`)
	wsRe    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,50}$`)
)

// Validators returns the registry with one validator per request message.
func Validators() *validate.Registry {
	r := validate.NewRegistry()
	validate.Add(r, func(m *rolesetv1.UpsertClusterRequest) error {
		return validate.First(
			validate.Pattern("cluster_id", m.GetClusterId(), idRe, "cluster_id"),
			validate.Pattern("host", m.GetHost(), hostRe, "host"),
			validate.Min("port", m.GetPort(), 1), validate.Max("port", m.GetPort(), 65535),
			validate.Pattern("maintenance_database", m.GetMaintenanceDatabase(), pgIdent, "identifier"),
			validate.Pattern("admin_user", m.GetAdminUser(), pgIdent, "identifier"),
			validate.Required("admin_password", m.GetAdminPassword()),
			validate.MaxLen("admin_password", m.GetAdminPassword(), 1024))
	})
	validate.Add(r, func(*rolesetv1.ListClustersRequest) error { return nil })
	validate.Add(r, func(m *rolesetv1.CreateRoleRequest) error {
		// The name's own rules (reserved names and prefixes) are checked by core, which
		// answers RESERVED_NAME; here only presence.
		return validate.First(validate.Pattern("cluster_id", m.GetClusterId(), idRe, "cluster_id"),
			validate.Required("name", m.GetName()))
	})
	validate.Add(r, func(m *rolesetv1.UpdateRoleRequest) error {
		return validate.Required("role_id", m.GetRoleId())
	})
	validate.Add(r, func(m *rolesetv1.DeleteRoleRequest) error { return validate.Required("role_id", m.GetRoleId()) })
	validate.Add(r, func(m *rolesetv1.ListRolesRequest) error {
		return validate.Pattern("cluster_id", m.GetClusterId(), idRe, "cluster_id")
	})
	validate.Add(r, func(*rolesetv1.SweepRequest) error { return nil })
	validate.Add(r, func(m *rolesetv1.UpsertDatatableRequest) error {
		nameErr := error(nil)
		if !dtref.ValidName(m.GetName()) {
			nameErr = errs.InvalidField("name", "datatable_name", "name must be 1-63 characters of [A-Za-z0-9_-]")
		}
		return validate.First(
			validate.Pattern("workspace", m.GetWorkspace(), wsRe, "workspace"), nameErr,
			validate.Pattern("cluster_id", m.GetClusterId(), idRe, "cluster_id"),
			validate.Pattern("database", m.GetDatabase(), pgIdent, "identifier"),
			validate.Pattern("admin_user", m.GetAdminUser(), pgIdent, "identifier"),
			validate.Required("admin_password", m.GetAdminPassword()),
			validate.MaxLen("admin_password", m.GetAdminPassword(), 1024),
			checkDefaultRole(m.GetDefaultRole()))
	})
	validate.Add(r, func(m *rolesetv1.SetPermissionsRequest) error {
		if err := validate.First(validate.Pattern("workspace", m.GetWorkspace(), wsRe, "workspace"),
			checkDefaultRole(m.GetDefaultRole())); err != nil {
			return err
		}
		for k, v := range m.GetRoles() {
			if k != rolename.AdminRole {
				if _, err := parseRoleID(k); err != nil {
					return err
				}
			}
			if err := validate.MaxItems("roles."+k+".tenants", v.GetTenants(), 1000); err != nil {
				return err
			}
			if _, err := tenancy.ParseTenants(v.GetTenants()); err != nil {
				return errs.InvalidField("roles."+k+".tenants", "tenant", err.Error())
			}
		}
		return nil
	})
	validate.Add(r, func(m *rolesetv1.GetPermissionsRequest) error {
		return validate.Pattern("workspace", m.GetWorkspace(), wsRe, "workspace")
	})
	// Reference parsing is the handler's (it answers MALFORMED_REFERENCE with the parser's rule).
	validate.Add(r, func(*rolesetv1.ResolveConnectionRequest) error { return nil })
	validate.Add(r, func(*rolesetv1.ExplainConnectionRequest) error { return nil })
	validate.Add(r, func(m *rolesetv1.WatchRequest) error { return validate.MaxItems("kinds", m.GetKinds(), 32) })
	return r
}
