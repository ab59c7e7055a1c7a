package api_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/validate/validatetest"
	"github.com/millwright/millwright/services/roleset/internal/api"
)

// Every workspace, cluster id, host and identifier roleset takes is refused, when bad, with the
// same rule as in policy and billing (their TestSharedFieldRules run the same table). Roleset
// used to accept "Demo" and an empty workspace, cluster id and host.
func TestSharedFieldRules(t *testing.T) {
	bases := []proto.Message{
		&rolesetv1.UpsertClusterRequest{ClusterId: "c", Host: "db", Port: 5432, MaintenanceDatabase: "postgres",
			AdminUser: "admin", AdminPassword: "pw"},
		&rolesetv1.CreateRoleRequest{ClusterId: "c", Name: "r"},
		&rolesetv1.ListRolesRequest{ClusterId: "c"},
		&rolesetv1.UpsertDatatableRequest{Workspace: "w", Name: "main", ClusterId: "c", Database: "app",
			AdminUser: "owner", AdminPassword: "pw", DefaultRole: "$none"},
		&rolesetv1.SetPermissionsRequest{Workspace: "w", Name: "main", DefaultRole: "$none"},
		&rolesetv1.GetPermissionsRequest{Workspace: "w", Name: "main"},
		&rolesetv1.GetClusterRequest{ClusterId: "c"},
		&rolesetv1.GetDatatableRequest{Workspace: "w", Name: "main"},
		&rolesetv1.ListDatatablesRequest{Workspace: "w", ClusterId: "c"},
	}
	validatetest.Run(t, api.Validators(), []grpc.ServiceDesc{rolesetv1.ClusterService_ServiceDesc,
		rolesetv1.RoleService_ServiceDesc, rolesetv1.DatatableService_ServiceDesc,
		rolesetv1.ConnectionService_ServiceDesc, rolesetv1.EventService_ServiceDesc}, bases, validatetest.Options{
		Optional: map[string]string{"millwright.roleset.v1.ListDatatablesRequest.cluster_id": "a filter: empty means any cluster"}})
}

// SetPermissions bounds its roles map, and refuses a bad entry deterministically.
func TestSetPermissionsBounds(t *testing.T) {
	roles := map[string]*rolesetv1.Tenants{}
	for i := range 1000 {
		roles[strconv.Itoa(i+1)] = &rolesetv1.Tenants{}
	}
	req := &rolesetv1.SetPermissionsRequest{Workspace: "w", Name: "main", DefaultRole: "$none", Roles: roles}
	require.NoError(t, api.Validators().Validate(req))
	roles["admin"] = &rolesetv1.Tenants{}
	md := errs.Infos(api.Validators().Validate(req))[0].GetMetadata()
	require.Equal(t, map[string]string{"field": "roles", "rule": "max_items"}, map[string]string{"field": md["field"], "rule": md["rule"]})

	// Two bad entries: the first in key order is named, every time.
	bad := &rolesetv1.SetPermissionsRequest{Workspace: "w", Name: "main", DefaultRole: "$none", Roles: map[string]*rolesetv1.Tenants{
		"1": {Tenants: []string{"u/ok", "x/bad"}}, "2": {Tenants: []string{"y/bad"}}}}
	for range 20 {
		md := errs.Infos(api.Validators().Validate(bad))[0].GetMetadata()
		require.Equal(t, "roles.1.tenants", md["field"])
	}
}
