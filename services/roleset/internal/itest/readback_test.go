package itest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/paging"
)

// listAll pages through a List with page_size size, checking every page's bound, and returns
// every item in order with the number of pages it took. list answers one page for a token.
func listAll[T any](t *testing.T, size int32, list func(size int32, token string) ([]T, string, error)) ([]T, int) {
	t.Helper()
	var all []T
	token, pages := "", 0
	for {
		items, next, err := list(size, token)
		require.NoError(t, err)
		pages++
		if size > 0 {
			require.LessOrEqual(t, len(items), int(size))
		}
		all = append(all, items...)
		if next == "" {
			return all, pages
		}
		require.Len(t, items, int(size), "only the last page is short")
		token = next
		require.Less(t, pages, 100, "paging does not end")
	}
}

// requirePageToken asserts an InvalidArgument naming page_token.
func requirePageToken(t *testing.T, err error) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Equal(t, "page_token", errs.Infos(err)[0].GetMetadata()["field"])
}

// readBack checks one List against its Get: every filter case pages (page_size 1, and the
// default in one page) to exactly the names it wants, each item reads back equal through get,
// a token is refused with other filters or when forged, and an empty answer has no token.
type readBack[R proto.Message, T proto.Message] struct {
	cases map[string]listCase[R]
	list  func(req R, size int32, token string) ([]T, string, error)
	name  func(T) string
	get   func(T) (T, error)
	// foreign is a next_page_token issued for other filters (or another List), refused when
	// sent with refiled.
	foreign string
	refiled R
}

func (rb readBack[R, T]) run(t *testing.T) {
	for name, tc := range rb.cases {
		t.Run(name, func(t *testing.T) {
			list := func(size int32, tok string) ([]T, string, error) { return rb.list(tc.req, size, tok) }
			one, pages := listAll(t, 1, list)
			require.Equal(t, max(1, len(tc.want)), pages, "page_size 1: one page per item")
			all, pages := listAll(t, 0, list)
			require.Equal(t, 1, pages, "the default page holds them all")
			require.Len(t, all, len(one))
			var names []string
			for i, item := range all {
				require.True(t, proto.Equal(item, one[i]), "same items at every page size")
				names = append(names, rb.name(item))
				got, err := rb.get(item)
				require.NoError(t, err)
				require.True(t, proto.Equal(item, got), "Get answers what List does: %v != %v", got, item)
			}
			require.Equal(t, tc.want, names)
		})
	}
	t.Run("a token with other filters, or forged, is refused", func(t *testing.T) {
		require.NotEmpty(t, rb.foreign)
		_, _, err := rb.list(rb.refiled, 1, rb.foreign)
		requirePageToken(t, err)
		_, _, err = rb.list(rb.refiled, 1, "not-a-token")
		requirePageToken(t, err)
		_, _, err = rb.list(rb.refiled, 1, paging.Encode("forged", "x"))
		requirePageToken(t, err)
		_, _, err = rb.list(rb.refiled, 501, "")
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Equal(t, "page_size", errs.Infos(err)[0].GetMetadata()["field"])
	})
}

// listCase is one filter set of a List and the names it must answer, in order.
type listCase[R any] struct {
	req  R
	want []string
}

// TestReadBack: clusters, roles and data tables read back one by one (Get) and page by page
// (List, pkg/paging) with their filters; another cluster's roles and another workspace's data
// tables are absent; unknown ones are NotFound (Get) or an empty page without a token (List).
func TestReadBack(t *testing.T) {
	f := newFixture(t, 1)
	clusters, roles, dts := rolesetv1.NewClusterServiceClient(f.r.cc), f.r.roles(), f.r.datatables()
	// A second registration of the same server under another id ("b" sorts after "a"): its
	// catalog and data tables are other rows.
	clusterB := f.clusterID + "b"
	_, err := clusters.UpsertCluster(adminCtx(), &rolesetv1.UpsertClusterRequest{ClusterId: clusterB, Host: f.host, Port: int32(f.port),
		MaintenanceDatabase: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass})
	require.NoError(t, err)
	other, err := roles.CreateRole(adminCtx(), &rolesetv1.CreateRoleRequest{ClusterId: clusterB, Name: "other_" + randHex(3)})
	require.NoError(t, err)
	_, err = roles.UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.amer.GetRoleId(), Enabled: proto.Bool(false)})
	require.NoError(t, err)
	upsert := func(ws, name, cluster string, mode rolesetv1.CredentialMode) {
		_, err := dts.UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: ws, Name: name, ClusterId: cluster,
			Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass, DefaultRole: "$none", CredentialMode: mode})
		require.NoError(t, err)
	}
	upsert("ws", "aux", clusterB, rolesetv1.CredentialMode_CREDENTIAL_MODE_UNSPECIFIED) // a new data table: proxy
	upsert("ws", "zeta", clusterB, rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT)
	upsert("wsb", "main", f.clusterID, rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT)
	// Tokens of first pages, to send with other filters.
	rolesPage, err := roles.ListRoles(adminCtx(), &rolesetv1.ListRolesRequest{ClusterId: f.clusterID, PageSize: 1})
	require.NoError(t, err)
	dtsPage, err := dts.ListDatatables(adminCtx(), &rolesetv1.ListDatatablesRequest{Workspace: "ws", PageSize: 1})
	require.NoError(t, err)

	t.Run("clusters", func(t *testing.T) {
		list := func(_ *rolesetv1.ListClustersRequest, size int32, token string) ([]*rolesetv1.Cluster, string, error) {
			res, err := clusters.ListClusters(adminCtx(), &rolesetv1.ListClustersRequest{PageSize: size, PageToken: token})
			return res.GetClusters(), res.GetNextPageToken(), err
		}
		readBack[*rolesetv1.ListClustersRequest, *rolesetv1.Cluster]{
			cases: map[string]listCase[*rolesetv1.ListClustersRequest]{
				"every cluster, by id": {&rolesetv1.ListClustersRequest{}, []string{f.clusterID, clusterB}}},
			list: list,
			name: (*rolesetv1.Cluster).GetClusterId,
			get: func(c *rolesetv1.Cluster) (*rolesetv1.Cluster, error) {
				res, err := clusters.GetCluster(adminCtx(), &rolesetv1.GetClusterRequest{ClusterId: c.GetClusterId()})
				return res.GetCluster(), err
			},
			foreign: rolesPage.GetNextPageToken(), // another List's
			refiled: &rolesetv1.ListClustersRequest{},
		}.run(t)
		t.Run("never a password", func(t *testing.T) {
			res, err := clusters.GetCluster(adminCtx(), &rolesetv1.GetClusterRequest{ClusterId: f.clusterID})
			require.NoError(t, err)
			require.NotContains(t, protojson.Format(res), f.adminPass)
		})
	})

	t.Run("roles", func(t *testing.T) {
		sorted := func(rs ...*rolesetv1.Role) []string {
			var out []string
			for _, r := range rs {
				out = append(out, r.GetName())
			}
			return out
		}
		list := func(req *rolesetv1.ListRolesRequest, size int32, token string) ([]*rolesetv1.Role, string, error) {
			req = proto.CloneOf(req)
			req.PageSize, req.PageToken = size, token
			res, err := roles.ListRoles(adminCtx(), req)
			return res.GetRoles(), res.GetNextPageToken(), err
		}
		a := f.clusterID
		readBack[*rolesetv1.ListRolesRequest, *rolesetv1.Role]{
			cases: map[string]listCase[*rolesetv1.ListRolesRequest]{
				"a cluster's roles, by name, not another's": {&rolesetv1.ListRolesRequest{ClusterId: a}, sorted(f.amer, f.apac, f.emea)},
				"the other cluster's":                       {&rolesetv1.ListRolesRequest{ClusterId: clusterB}, sorted(other.GetRole())},
				"enabled":                                   {&rolesetv1.ListRolesRequest{ClusterId: a, Enabled: proto.Bool(true)}, sorted(f.apac, f.emea)},
				"disabled":                                  {&rolesetv1.ListRolesRequest{ClusterId: a, Enabled: proto.Bool(false)}, sorted(f.amer)},
				"name prefix":                               {&rolesetv1.ListRolesRequest{ClusterId: a, NamePrefix: "emea_"}, sorted(f.emea)},
				"no name matches":                           {&rolesetv1.ListRolesRequest{ClusterId: a, NamePrefix: "zz"}, nil},
				"no such cluster: an empty list":            {&rolesetv1.ListRolesRequest{ClusterId: "nosuch"}, nil},
			},
			list: list,
			name: (*rolesetv1.Role).GetName,
			get: func(r *rolesetv1.Role) (*rolesetv1.Role, error) {
				res, err := roles.GetRole(adminCtx(), &rolesetv1.GetRoleRequest{RoleId: r.GetRoleId()})
				return res.GetRole(), err
			},
			foreign: rolesPage.GetNextPageToken(),
			refiled: &rolesetv1.ListRolesRequest{ClusterId: a, Enabled: proto.Bool(true)},
		}.run(t)
	})

	t.Run("data tables", func(t *testing.T) {
		list := func(req *rolesetv1.ListDatatablesRequest, size int32, token string) ([]*rolesetv1.Datatable, string, error) {
			req = proto.CloneOf(req)
			req.PageSize, req.PageToken = size, token
			res, err := dts.ListDatatables(adminCtx(), req)
			return res.GetDatatables(), res.GetNextPageToken(), err
		}
		direct, proxy := rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT, rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY
		readBack[*rolesetv1.ListDatatablesRequest, *rolesetv1.Datatable]{
			cases: map[string]listCase[*rolesetv1.ListDatatablesRequest]{
				"a workspace's, by name, not another's": {&rolesetv1.ListDatatablesRequest{Workspace: "ws"}, []string{"aux", "main", "zeta"}},
				"the other workspace's":                 {&rolesetv1.ListDatatablesRequest{Workspace: "wsb"}, []string{"main"}},
				"on one cluster":                        {&rolesetv1.ListDatatablesRequest{Workspace: "ws", ClusterId: clusterB}, []string{"aux", "zeta"}},
				"in one mode":                           {&rolesetv1.ListDatatablesRequest{Workspace: "ws", CredentialMode: direct}, []string{"main", "zeta"}},
				"both filters":                          {&rolesetv1.ListDatatablesRequest{Workspace: "ws", ClusterId: clusterB, CredentialMode: proxy}, []string{"aux"}},
				"no such workspace: an empty list":      {&rolesetv1.ListDatatablesRequest{Workspace: "nosuch"}, nil},
			},
			list: list,
			name: (*rolesetv1.Datatable).GetName,
			get: func(d *rolesetv1.Datatable) (*rolesetv1.Datatable, error) {
				res, err := dts.GetDatatable(adminCtx(), &rolesetv1.GetDatatableRequest{Workspace: d.GetWorkspace(), Name: d.GetName()})
				return res.GetDatatable(), err
			},
			foreign: dtsPage.GetNextPageToken(),
			refiled: &rolesetv1.ListDatatablesRequest{Workspace: "ws", ClusterId: f.clusterID},
		}.run(t)
		t.Run("what UpsertDatatable set, never the password", func(t *testing.T) {
			res, err := dts.GetDatatable(adminCtx(), &rolesetv1.GetDatatableRequest{Workspace: "ws", Name: "main"})
			require.NoError(t, err)
			require.True(t, proto.Equal(&rolesetv1.Datatable{Workspace: "ws", Name: "main", ClusterId: f.clusterID, Database: f.targetDB,
				AdminUser: f.adminUser, DefaultRole: f.emea.GetRoleId(), ViewerAccess: true, CredentialMode: direct}, res.GetDatatable()),
				"%v", res.GetDatatable())
			require.NotContains(t, protojson.Format(res), f.adminPass)
		})
	})

	t.Run("Get of what does not exist is NotFound", func(t *testing.T) {
		for name, call := range map[string]func() error{
			"cluster": func() error {
				_, err := clusters.GetCluster(adminCtx(), &rolesetv1.GetClusterRequest{ClusterId: "nosuch"})
				return err
			},
			"role": func() error {
				_, err := roles.GetRole(adminCtx(), &rolesetv1.GetRoleRequest{RoleId: "999999"})
				return err
			},
			"data table of another workspace": func() error {
				_, err := dts.GetDatatable(adminCtx(), &rolesetv1.GetDatatableRequest{Workspace: "wsb", Name: "aux"})
				return err
			},
		} {
			err := call()
			require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", name, err)
			require.Equal(t, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, reasonOf(err), name)
		}
		_, err := roles.GetRole(adminCtx(), &rolesetv1.GetRoleRequest{RoleId: "abc"})
		requireRule(t, err, "role_id", "role_id")
	})
}

// TestCreateRoleTakenNamesTheRole: a CreateRole whose name the catalog holds answers
// ALREADY_EXISTS naming the role's id (kind "role"), which GetRole reads back; a name held on
// the cluster by a role that is not in the catalog answers existing "" and says so.
func TestCreateRoleTakenNamesTheRole(t *testing.T) {
	f := newFixture(t, 1)
	foreign := "foreign_" + randHex(3)
	superExec(t, f.superDSN, fmt.Sprintf(`CREATE ROLE %s`, foreign))
	t.Cleanup(func() { superExec(t, f.superDSN, fmt.Sprintf(`DROP ROLE IF EXISTS %s`, foreign)) })
	for _, tc := range []struct {
		name, role, existing, says string
	}{
		{"a catalog role", f.emea.GetName(), f.emea.GetRoleId(), "role_id " + f.emea.GetRoleId()},
		{"a cluster role not in the catalog", foreign, "", "not in the catalog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.r.roles().CreateRole(adminCtx(), &rolesetv1.CreateRoleRequest{ClusterId: f.clusterID, Name: tc.role})
			require.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
			require.Equal(t, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS, reasonOf(err))
			require.Equal(t, map[string]string{"kind": "role", "existing": tc.existing}, errs.Infos(err)[0].GetMetadata())
			require.Contains(t, status.Convert(err).Message(), tc.says)
			if tc.existing == "" {
				return
			}
			got, err := f.r.roles().GetRole(adminCtx(), &rolesetv1.GetRoleRequest{RoleId: tc.existing})
			require.NoError(t, err)
			require.True(t, proto.Equal(f.emea, got.GetRole()), "the retry reads back the role its lost answer had")
		})
	}
}
