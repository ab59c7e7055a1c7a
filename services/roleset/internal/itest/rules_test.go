package itest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestRules is a table per rule of the spec. Every refusal is checked for its code and
// reason; every success logs in and looks at the rows it sees.
func TestRules(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	disabled := f.createRole(f.r, "off_"+randHex(3))
	_, err := f.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "ws", Name: "main",
		DefaultRole: f.emea.GetRoleId(), Roles: map[string]*rolesetv1.Tenants{
			f.emea.GetRoleId():   {Tenants: []string{"g/emea"}},
			f.apac.GetRoleId():   {Tenants: []string{"g/apac"}},
			f.amer.GetRoleId():   {Tenants: []string{"g/amer", "u/frank"}},
			disabled.GetRoleId(): {Tenants: []string{"*"}},
			"admin":              {Tenants: []string{"u/dave", "u/alice"}},
		}})
	require.NoError(t, err)
	_, err = f.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: disabled.GetRoleId(), Enabled: new(false)})
	require.NoError(t, err)
	_, err = f.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: "nodefault",
		ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass, DefaultRole: "$none"})
	require.NoError(t, err)

	P := f.policy
	O := policyv1.RunOrigin_value
	origin := func(s string) policyv1.RunOrigin { return policyv1.RunOrigin(O["RUN_ORIGIN_"+s]) }
	cases := []struct {
		name   string
		token  string
		ref    string
		agent  [2]string
		code   codes.Code
		reason commonv1.ErrorReason
		want   []int
		kind   rolesetv1.ConnectionKind
	}{
		{name: "no viewer: anonymous app", token: P.run("u/pub", origin("APP_ANONYMOUS"), ""), ref: "datatable://main?as=viewer",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_VIEWER},
		{name: "no viewer: schedule", token: P.run("u/pub", origin("SCHEDULE"), ""), ref: "datatable://main?as=viewer",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_VIEWER},
		{name: "no viewer: trigger", token: P.run("u/pub", origin("TRIGGER"), ""), ref: "datatable://main?as=viewer",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_VIEWER},
		{name: "no viewer: AI tool job, even for an admin owner", token: P.run("u/boss", origin("AI_TOOL"), ""), ref: "datatable://main?as=viewer",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_VIEWER},
		{name: "no viewer: agent sentinel", token: P.run("u/pub", origin("SCHEDULE"), ""), agent: [2]string{"main", "$viewer"},
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_VIEWER},
		{name: "admin viewer with no tenant entry: no role, never admin", token: f.viewerRun("dave@x"), ref: "datatable://main?as=viewer",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "viewer named by admin's tenants gets their roles, not admin", token: f.viewerRun("alice@x"), ref: "datatable://main?as=viewer",
			want: []int{1, 2}, kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE},
		{name: "viewer reaching no role", token: f.viewerRun("eve@x"), ref: "datatable://main?as=viewer",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "named role, owner not a tenant", token: P.run("u/bob", origin("DIRECT"), "bob@x"), ref: "datatable://main?role=" + f.emea.GetName(),
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "named role, owner a tenant by user", token: P.run("u/frank", origin("DIRECT"), "frank@x"), ref: "datatable://main?role=" + f.amer.GetName(),
			want: []int{5}, kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE},
		{name: "named role via agent fields", token: P.run("u/bob", origin("DIRECT"), "bob@x"), agent: [2]string{"main", f.apac.GetName()},
			want: []int{3, 4}, kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE},
		{name: "disabled role, even for a workspace admin", token: P.run("u/boss", origin("DIRECT"), "boss@x"), ref: "datatable://main?role=" + disabled.GetName(),
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_ROLE_DISABLED},
		{name: "disabled role with * tenant gives a viewer nothing", token: f.viewerRun("eve@x"), ref: "datatable://main?as=viewer",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "admin role for a non-admin owner", token: P.run("u/bob", origin("DIRECT"), "bob@x"), ref: "datatable://main?role=admin",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "admin role for a workspace admin owner", token: P.run("u/boss", origin("DIRECT"), "boss@x"), ref: "datatable://main?role=admin",
			want: []int{1, 2, 3, 4, 5}, kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ADMIN},
		{name: "admin role for an admin tenant", token: P.run("u/alice", origin("DIRECT"), "alice@x"), ref: "datatable://main?role=admin",
			want: []int{1, 2, 3, 4, 5}, kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ADMIN},
		{name: "default role, owner a tenant", token: P.run("u/alice", origin("DIRECT"), "alice@x"), ref: "datatable://main",
			want: []int{1, 2}, kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE},
		{name: "default role, owner not a tenant", token: P.run("u/bob", origin("DIRECT"), "bob@x"), ref: "datatable://main",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "no default role", token: P.run("u/boss", origin("DIRECT"), "boss@x"), ref: "datatable://nodefault",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "group owner", token: P.run("g/emea", origin("SCHEDULE"), ""), ref: "datatable://main",
			code: codes.PermissionDenied, reason: commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		{name: "unknown data table", token: f.viewerRun("alice@x"), ref: "datatable://nope?as=viewer",
			code: codes.NotFound, reason: commonv1.ErrorReason_ERROR_REASON_NOT_FOUND},
		{name: "unknown role", token: P.run("u/boss", origin("DIRECT"), "boss@x"), ref: "datatable://main?role=nosuch",
			code: codes.NotFound, reason: commonv1.ErrorReason_ERROR_REASON_NOT_FOUND},
		{name: "unknown job token", token: "mwj_nope", ref: "datatable://main",
			code: codes.Unauthenticated, reason: commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
	}
	for _, ref := range []string{
		"datatable://main?as=owner", "datatable://main?role=a&as=viewer", "datatable://main?role=", "datatable://main?x=1",
		"datatable://main?role=a&role=b", "datatable://main?AS=viewer&as=viewer", "datatable://main?", "datatable://main#x",
		"datatable://main?as=viewer -- role admin", "postgres://main", "datatable://u:p@main", "datatable://main?role=wm_set_x",
		"datatable://main?role=pg_read_all_data", "datatable://main?role=$viewer",
	} {
		cases = append(cases, struct {
			name   string
			token  string
			ref    string
			agent  [2]string
			code   codes.Code
			reason commonv1.ErrorReason
			want   []int
			kind   rolesetv1.ConnectionKind
		}{name: "malformed " + ref, token: P.run("u/boss", origin("DIRECT"), "boss@x"), ref: ref,
			code: codes.InvalidArgument, reason: commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &rolesetv1.ResolveConnectionRequest{Reference: tc.ref, Datatable: tc.agent[0], Role: tc.agent[1]}
			c, err := f.r.conns().ResolveConnection(jobCtx(tc.token), req)
			if tc.code != codes.OK {
				require.Error(t, err)
				require.Equal(t, tc.code, status.Code(err), err)
				require.Equal(t, tc.reason, reasonOf(err), err)
				require.Nil(t, c)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.kind, c.GetKind())
			got, err := query(ctx, c)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("reserved role names are refused", func(t *testing.T) {
		for _, n := range []string{"wm_set_abc", "admin", "ADMIN", "postgres", "public", "pg_monitor", "$viewer", "a b", `x"y`, ""} {
			_, err := f.r.roles().CreateRole(adminCtx(), &rolesetv1.CreateRoleRequest{ClusterId: f.clusterID, Name: n})
			require.Error(t, err, n)
			require.Equal(t, codes.InvalidArgument, status.Code(err), n)
		}
	})
}
