package itest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestRoleAttachedToDatatable: a role is usable through a data table only if it is attached to
// that data table. Workspace B's admin, on B's own data table on the same cluster, names a role
// attached only to workspace A's data table: refused exactly like an unknown role (NotFound),
// so B learns nothing about A's roles. The default role has the same rule, on write and on use.
func TestRoleAttachedToDatatable(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	// B's data table on A's cluster and database; emea is attached only to A's "main".
	_, err := f.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "wsb", Name: "evedt",
		ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass, DefaultRole: "$none",
		CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT})
	require.NoError(t, err)
	_, err = f.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "wsb", Name: "evedt",
		DefaultRole: "$none", Roles: map[string]*rolesetv1.Tenants{f.apac.GetRoleId(): {Tenants: []string{"*"}}}})
	require.NoError(t, err)
	bAdmin := f.policy.runIn("wsb", "u/dave", 0, "")

	notFound := func(t *testing.T, ref string) {
		t.Helper()
		_, err := f.resolve(f.r, bAdmin, ref)
		require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", ref, err)
		require.Equal(t, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, reasonOf(err))
	}
	t.Run("named role attached elsewhere reads as unknown", func(t *testing.T) {
		notFound(t, "datatable://evedt?role="+f.emea.GetName())
		_, unknown := f.resolve(f.r, bAdmin, "datatable://evedt?role=no_such_role")
		_, elsewhere := f.resolve(f.r, bAdmin, "datatable://evedt?role="+f.emea.GetName())
		// Same answer, the name aside: nothing tells an attached-elsewhere role from no role.
		require.Equal(t, status.Convert(unknown).Message(), strings.ReplaceAll(status.Convert(elsewhere).Message(), f.emea.GetName(), "no_such_role"))
	})
	t.Run("the attached role works", func(t *testing.T) {
		c, err := f.resolve(f.r, bAdmin, "datatable://evedt?role="+f.apac.GetName())
		require.NoError(t, err)
		require.Equal(t, f.apac.GetName(), c.GetUser())
	})
	t.Run("a default role must be attached, on write", func(t *testing.T) {
		_, err := f.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "wsb", Name: "evedt",
			DefaultRole: f.emea.GetRoleId(), Roles: map[string]*rolesetv1.Tenants{f.apac.GetRoleId(): {Tenants: []string{"*"}}}})
		requireRule(t, err, "default_role", "default_role_attached")
		_, err = f.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "wsb", Name: "evedt",
			ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass, DefaultRole: f.emea.GetRoleId()})
		requireRule(t, err, "default_role", "default_role_attached")
		p, err := f.r.datatables().GetPermissions(adminCtx(), &rolesetv1.GetPermissionsRequest{Workspace: "wsb", Name: "evedt"})
		require.NoError(t, err)
		require.Equal(t, "$none", p.GetDefaultRole(), "a refused write wrote nothing")
	})
	t.Run("a stored default that is not attached is refused on use", func(t *testing.T) {
		// As if written before the rule existed.
		_, err := f.r.pool.Exec(ctx, `UPDATE datatable SET default_role = $1 WHERE workspace = 'wsb' AND name = 'evedt'`, f.emea.GetRoleId())
		require.NoError(t, err)
		f.r.eng.DropCaches()
		_, err = f.resolve(f.r, bAdmin, "datatable://evedt")
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		require.Equal(t, commonv1.ErrorReason_ERROR_REASON_NO_ROLE, reasonOf(err))
	})
	t.Run("A's own admin still uses A's role", func(t *testing.T) {
		c, err := f.resolve(f.r, f.policy.run("u/dave", 0, ""), "datatable://main?role="+f.emea.GetName())
		require.NoError(t, err)
		require.Equal(t, f.emea.GetName(), c.GetUser())
	})
}

// requireRule asserts an InvalidArgument naming the field and the rule.
func requireRule(t *testing.T, err error, field, rule string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(interface{ GetMetadata() map[string]string }); ok {
			md := info.GetMetadata()
			if md["field"] == field && md["rule"] == rule {
				return
			}
		}
	}
	t.Fatalf("want field %q rule %q, got %v", field, rule, status.Convert(err).Details())
}
