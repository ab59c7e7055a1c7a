package cmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

func (a *app) clustersCmd() *cobra.Command {
	c := &cobra.Command{Use: "clusters", Short: "Target PostgreSQL clusters (roleset's ClusterService)", GroupID: "admin"}
	c.AddCommand(getCommand(a, "cluster (never its password)", roleset, rolesetv1.NewClusterServiceClient, rolesetv1.ClusterServiceClient.GetCluster, "cluster_id"),
		listCommand(a, "registered cluster", roleset, rolesetv1.NewClusterServiceClient, rolesetv1.ClusterServiceClient.ListClusters, false))
	req := &rolesetv1.UpsertClusterRequest{}
	var passwordFile string
	upsert := &cobra.Command{
		Use:   "upsert CLUSTER_ID",
		Short: "UpsertCluster: the admin password from --admin-password-file (- for standard input)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.ClusterId = args[0]
			var err error
			if req.AdminPassword, err = a.secret(passwordFile); err != nil {
				return err
			}
			return call(a, cmd, roleset, rolesetv1.NewClusterServiceClient, func(c rolesetv1.ClusterServiceClient) (*rolesetv1.UpsertClusterResponse, error) {
				return c.UpsertCluster(cmd.Context(), req)
			})
		},
	}
	upsert.Flags().StringVar(&req.Host, "host", "", "the cluster's host")
	upsert.Flags().Int32Var(&req.Port, "port", 5432, "the cluster's port")
	upsert.Flags().StringVar(&req.MaintenanceDatabase, "maintenance-database", "", "the database roleset connects to (default: the service's)")
	upsert.Flags().StringVar(&req.AdminUser, "admin-user", "", "the cluster admin login (not a superuser)")
	upsert.Flags().StringVar(&passwordFile, "admin-password-file", "", "a file holding the admin's password (- for standard input)")
	c.AddCommand(upsert)
	return c
}

func (a *app) rolesCmd() *cobra.Command {
	c := &cobra.Command{Use: "roles", Short: "The roles of a cluster (roleset's RoleService)", GroupID: "admin"}
	var cluster string
	create := &cobra.Command{
		Use: "create NAME", Short: "CreateRole NAME on --cluster", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, roleset, rolesetv1.NewRoleServiceClient, func(c rolesetv1.RoleServiceClient) (*rolesetv1.CreateRoleResponse, error) {
				return c.CreateRole(cmd.Context(), &rolesetv1.CreateRoleRequest{ClusterId: cluster, Name: args[0]})
			})
		},
	}
	create.Flags().StringVar(&cluster, "cluster", "", "the cluster id")
	var enabled bool
	var name string
	update := &cobra.Command{
		Use: "update ROLE_ID", Short: "UpdateRole: --enabled, --name (only those given change)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &rolesetv1.UpdateRoleRequest{RoleId: args[0]}
			if cmd.Flags().Changed("enabled") {
				req.Enabled = &enabled
			}
			if cmd.Flags().Changed("name") {
				req.Name = &name
			}
			return call(a, cmd, roleset, rolesetv1.NewRoleServiceClient, func(c rolesetv1.RoleServiceClient) (*rolesetv1.UpdateRoleResponse, error) {
				return c.UpdateRole(cmd.Context(), req)
			})
		},
	}
	update.Flags().BoolVar(&enabled, "enabled", true, "whether the role may be handed out")
	update.Flags().StringVar(&name, "name", "", "a new name")
	del := &cobra.Command{
		Use: "delete ROLE_ID", Short: "DeleteRole", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, roleset, rolesetv1.NewRoleServiceClient, func(c rolesetv1.RoleServiceClient) (*rolesetv1.DeleteRoleResponse, error) {
				return c.DeleteRole(cmd.Context(), &rolesetv1.DeleteRoleRequest{RoleId: args[0]})
			})
		},
	}
	c.AddCommand(getCommand(a, "catalog role", roleset, rolesetv1.NewRoleServiceClient, rolesetv1.RoleServiceClient.GetRole, "role_id"),
		listCommand(a, "catalog role of --cluster-id", roleset, rolesetv1.NewRoleServiceClient, rolesetv1.RoleServiceClient.ListRoles, false),
		create, update, del)
	return c
}

func (a *app) datatablesCmd() *cobra.Command {
	c := &cobra.Command{Use: "datatables", Short: "Data tables (roleset's DatatableService)", GroupID: "admin"}
	req := &rolesetv1.UpsertDatatableRequest{}
	var passwordFile, mode string
	var viewer bool
	upsert := &cobra.Command{
		Use:   "upsert NAME",
		Short: "UpsertDatatable in the workspace: the admin password from --admin-password-file",
		Args:  cobra.ExactArgs(1),
		RunE: a.inWorkspace(func(cmd *cobra.Command, args []string, ws string) error {
			req.Workspace, req.Name = ws, args[0]
			var err error
			if req.AdminPassword, err = a.secret(passwordFile); err != nil {
				return err
			}
			if cmd.Flags().Changed("viewer-access") {
				req.ViewerAccess = &viewer
			}
			if mode != "" {
				m, ok := rolesetv1.CredentialMode_value["CREDENTIAL_MODE_"+strings.ToUpper(mode)]
				if !ok {
					return fmt.Errorf("--credential-mode %q: direct or proxy", mode)
				}
				req.CredentialMode = rolesetv1.CredentialMode(m)
			}
			return call(a, cmd, roleset, rolesetv1.NewDatatableServiceClient, func(c rolesetv1.DatatableServiceClient) (*rolesetv1.UpsertDatatableResponse, error) {
				return c.UpsertDatatable(cmd.Context(), req)
			})
		}),
	}
	upsert.Flags().StringVar(&req.ClusterId, "cluster", "", "the cluster id")
	upsert.Flags().StringVar(&req.Database, "database", "", "the database on the cluster")
	upsert.Flags().StringVar(&req.AdminUser, "admin-user", "", "the data table's admin login")
	upsert.Flags().StringVar(&passwordFile, "admin-password-file", "", "a file holding the admin's password (- for standard input)")
	upsert.Flags().StringVar(&req.DefaultRole, "default-role", "", "the role of a viewer no tenant names")
	upsert.Flags().BoolVar(&viewer, "viewer-access", false, "whether jobs may ask for ?as=viewer")
	upsert.Flags().StringVar(&mode, "credential-mode", "", "direct or proxy (default: the service's)")
	c.AddCommand(getCommand(a, "data table of the workspace (never its admin password)", roleset, rolesetv1.NewDatatableServiceClient,
		rolesetv1.DatatableServiceClient.GetDatatable, "name"),
		listCommand(a, "data table of the workspace", roleset, rolesetv1.NewDatatableServiceClient, rolesetv1.DatatableServiceClient.ListDatatables, false),
		upsert)
	return c
}

func (a *app) permissionsCmd() *cobra.Command {
	c := &cobra.Command{Use: "permissions", Short: "Which tenants get which role of a data table", GroupID: "admin"}
	get := &cobra.Command{
		Use: "get DATATABLE", Short: "GetPermissions", Args: cobra.ExactArgs(1),
		RunE: a.inWorkspace(func(cmd *cobra.Command, args []string, ws string) error {
			return call(a, cmd, roleset, rolesetv1.NewDatatableServiceClient, func(c rolesetv1.DatatableServiceClient) (*rolesetv1.GetPermissionsResponse, error) {
				return c.GetPermissions(cmd.Context(), &rolesetv1.GetPermissionsRequest{Workspace: ws, Name: args[0]})
			})
		}),
	}
	var defaultRole string
	var roles []string
	set := &cobra.Command{
		Use:   "set DATATABLE --role ROLE=TENANT,... ...",
		Short: "SetPermissions: replace the whole map (every role not named loses its tenants)",
		Args:  cobra.ExactArgs(1),
		RunE: a.inWorkspace(func(cmd *cobra.Command, args []string, ws string) error {
			req := &rolesetv1.SetPermissionsRequest{Workspace: ws, Name: args[0], DefaultRole: defaultRole, Roles: map[string]*rolesetv1.Tenants{}}
			for _, r := range roles {
				role, tenants, ok := strings.Cut(r, "=")
				if !ok || role == "" {
					return fmt.Errorf("--role %q: want ROLE=TENANT[,TENANT...] (tenants u/<user> or g/<group>)", r)
				}
				req.Roles[role] = &rolesetv1.Tenants{Tenants: strings.Split(tenants, ",")}
			}
			return call(a, cmd, roleset, rolesetv1.NewDatatableServiceClient, func(c rolesetv1.DatatableServiceClient) (*rolesetv1.SetPermissionsResponse, error) {
				return c.SetPermissions(cmd.Context(), req)
			})
		}),
	}
	set.Flags().StringVar(&defaultRole, "default-role", "", "the role of a viewer no tenant names")
	set.Flags().StringArrayVar(&roles, "role", nil, "ROLE=TENANT[,TENANT...] (repeatable)")
	c.AddCommand(get, set)
	return c
}

// secret reads a password from a file ("-": standard input), never from a flag's value;
// "" when no file is named (the service then keeps what it has, or refuses).
func (a *app) secret(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := a.readInput(file)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", errors.New(file + ": empty password")
	}
	return s, nil
}
