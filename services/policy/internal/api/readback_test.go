package api_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/paging"
)

// pager fetches one page of a List: its rows as strings, and the next token.
type pager func(size int32, token string) ([]string, string, error)

// requirePaging reads the whole list in one page, then with pages of 1 and of 2: the same
// rows in the same order, no row twice, the last page without a token. It returns the rows.
func requirePaging(t *testing.T, fetch pager) []string {
	t.Helper()
	all, next, err := fetch(0, "")
	require.NoError(t, err)
	require.Empty(t, next, "everything fits the default page")
	for _, size := range []int32{1, 2} {
		var got []string
		token, pages := "", 0
		for {
			rows, next, err := fetch(size, token)
			require.NoError(t, err)
			require.LessOrEqual(t, len(rows), int(size))
			got = append(got, rows...)
			pages++
			require.LessOrEqual(t, pages, len(all)+1, "paging does not end")
			if next == "" {
				break
			}
			token = next
		}
		require.Equal(t, all, got, "pages of %d", size)
	}
	return all
}

// requireBadPages: a page size out of range and a token not ours are InvalidArgument naming
// the field; a token of another query (otherToken, when given) is refused too.
func requireBadPages(t *testing.T, fetch pager, otherToken string) {
	t.Helper()
	_, _, err := fetch(501, "")
	requireField(t, err, "page_size")
	_, _, err = fetch(-1, "")
	requireField(t, err, "page_size")
	_, _, err = fetch(0, "not-a-token")
	requireField(t, err, "page_token")
	if otherToken != "" {
		_, _, err = fetch(0, otherToken)
		requireField(t, err, "page_token")
	}
}

func TestReadBackWorkspaceModel(t *testing.T) {
	r := replicaWith(t)
	// Empty: no workspace yet.
	wss := func(size int32, token string) ([]string, string, error) {
		resp, err := r.ws.ListWorkspaces(service, &policyv1.ListWorkspacesRequest{PageSize: size, PageToken: token})
		return convertNames(resp.GetWorkspaces(), (*policyv1.Workspace).GetWorkspace), resp.GetNextPageToken(), err
	}
	rows, next, err := wss(0, "")
	require.NoError(t, err)
	require.Empty(t, rows)
	require.Empty(t, next)

	workspaceWith(t, r, "w", "v", "x")
	require.Equal(t, []string{"v", "w", "x"}, requirePaging(t, wss))
	for _, u := range []string{"dan", "op1", "op2", "zed"} {
		role := policyv1.Role_ROLE_OPERATOR
		if u == "dan" {
			role = policyv1.Role_ROLE_DEVELOPER
		}
		member(t, r, "w", u, role)
	}
	member(t, r, "v", "vic", policyv1.Role_ROLE_OPERATOR)
	_, err = r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "zed", Email: "zed@x",
		Role: policyv1.Role_ROLE_OPERATOR, Disabled: true})
	require.NoError(t, err)
	for _, g := range []struct{ ws, name string }{{"w", "ops"}, {"w", "all"}, {"w", "devs"}, {"v", "vops"}} {
		members := []string{"op1", "op2"}
		switch g.name {
		case "all":
			members = []string{"dan", "op1", "op2"}
		case "devs":
			members = []string{"dan"}
		case "vops":
			members = []string{"vic"}
		}
		_, err := r.ws.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: g.ws, Name: g.name, Members: members})
		require.NoError(t, err)
	}
	for _, f := range []struct{ ws, name string }{{"w", "sales"}, {"w", "hr"}, {"v", "vsales"}} {
		_, err := r.ws.UpsertFolder(admin, &policyv1.UpsertFolderRequest{Workspace: f.ws, Name: f.name, Readers: []string{"g/" + map[string]string{"w": "ops", "v": "vops"}[f.ws]}})
		require.NoError(t, err)
	}
	op1 := userToken(t, r, "w", "op1")
	vic := userToken(t, r, "v", "vic")

	t.Run("workspace", func(t *testing.T) {
		got, err := r.ws.GetWorkspace(as(op1), &policyv1.GetWorkspaceRequest{Workspace: "w"})
		require.NoError(t, err)
		require.Equal(t, "w", got.GetWorkspace().GetName())
		require.NotNil(t, got.GetWorkspace().GetCreateTime())
		_, err = r.ws.GetWorkspace(as(op1), &policyv1.GetWorkspaceRequest{Workspace: "v"})
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE)
		_, err = r.ws.GetWorkspace(service, &policyv1.GetWorkspaceRequest{Workspace: "nope"})
		requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
		_, err = r.ws.ListWorkspaces(as(op1), &policyv1.ListWorkspacesRequest{})
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
		requireBadPages(t, wss, "")
	})

	members := func(ctx func() string, ws string, role policyv1.Role, disabled bool) pager {
		return func(size int32, token string) ([]string, string, error) {
			resp, err := r.ws.ListMembers(as(ctx()), &policyv1.ListMembersRequest{Workspace: ws, Role: role, IncludeDisabled: disabled,
				PageSize: size, PageToken: token})
			return convertNames(resp.GetMembers(), (*policyv1.Member).GetUsername), resp.GetNextPageToken(), err
		}
	}
	t.Run("members", func(t *testing.T) {
		byOp := func() string { return op1 }
		require.Equal(t, []string{"admin", "dan", "op1", "op2"}, requirePaging(t, members(byOp, "w", 0, false)), "enabled members of w only")
		require.Equal(t, []string{"admin", "dan", "op1", "op2", "zed"}, requirePaging(t, members(byOp, "w", 0, true)))
		require.Equal(t, []string{"op1", "op2"}, requirePaging(t, members(byOp, "w", policyv1.Role_ROLE_OPERATOR, false)))
		require.Equal(t, []string{"admin", "vic"}, requirePaging(t, members(func() string { return serviceToken }, "v", 0, false)))
		_, other, err := members(byOp, "w", policyv1.Role_ROLE_OPERATOR, false)(1, "")
		require.NoError(t, err)
		requireBadPages(t, members(byOp, "w", 0, false), other)
		_, _, err = members(byOp, "v", 0, false)(0, "")
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE)
		got, err := r.ws.GetMember(as(op1), &policyv1.GetMemberRequest{Workspace: "w", Username: "dan"})
		require.NoError(t, err)
		require.Equal(t, "dan@x", got.GetMember().GetEmail())
		_, err = r.ws.GetMember(service, &policyv1.GetMemberRequest{Workspace: "w", Username: "vic"})
		requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
		_, err = r.ws.ListMembers(service, &policyv1.ListMembersRequest{Workspace: "w", Role: policyv1.Role(42)})
		requireField(t, err, "role")
	})

	t.Run("groups and folders", func(t *testing.T) {
		groups := func(ws, memberOf string) pager {
			return func(size int32, token string) ([]string, string, error) {
				resp, err := r.ws.ListGroups(as(op1), &policyv1.ListGroupsRequest{Workspace: ws, Member: memberOf, PageSize: size, PageToken: token})
				return convertNames(resp.GetGroups(), (*policyv1.Group).GetName), resp.GetNextPageToken(), err
			}
		}
		require.Equal(t, []string{"all", "devs", "ops"}, requirePaging(t, groups("w", "")))
		require.Equal(t, []string{"all", "devs"}, requirePaging(t, groups("w", "dan")))
		rows, next, err := groups("w", "nobody")(0, "")
		require.NoError(t, err)
		require.Empty(t, rows, "an empty result")
		require.Empty(t, next)
		_, other, err := groups("w", "dan")(1, "")
		require.NoError(t, err)
		requireBadPages(t, groups("w", ""), other)
		g, err := r.ws.GetGroup(as(op1), &policyv1.GetGroupRequest{Workspace: "w", Name: "all"})
		require.NoError(t, err)
		require.Equal(t, []string{"dan", "op1", "op2"}, g.GetGroup().GetMembers())
		_, err = r.ws.GetGroup(as(vic), &policyv1.GetGroupRequest{Workspace: "w", Name: "all"})
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE)
		_, err = r.ws.GetGroup(service, &policyv1.GetGroupRequest{Workspace: "w", Name: "vops"})
		requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)

		folders := func(size int32, token string) ([]string, string, error) {
			resp, err := r.ws.ListFolders(as(op1), &policyv1.ListFoldersRequest{Workspace: "w", PageSize: size, PageToken: token})
			return convertNames(resp.GetFolders(), (*policyv1.Folder).GetName), resp.GetNextPageToken(), err
		}
		require.Equal(t, []string{"hr", "sales"}, requirePaging(t, folders))
		f, err := r.ws.GetFolder(as(op1), &policyv1.GetFolderRequest{Workspace: "w", Name: "sales"})
		require.NoError(t, err)
		require.Equal(t, []string{"g/ops"}, f.GetFolder().GetReaders())
		_, err = r.ws.GetFolder(service, &policyv1.GetFolderRequest{Workspace: "w", Name: "vsales"})
		requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
		requireBadPages(t, folders, "")
	})

	t.Run("a create that finds its key taken names it", func(t *testing.T) {
		_, err := r.ws.CreateWorkspace(admin, &policyv1.CreateWorkspaceRequest{Workspace: "w", Name: "again", AdminEmail: "a@x", AdminUsername: "a"})
		requireExisting(t, err, "workspace", "w")
	})
}

func requireExisting(t *testing.T, err error, kind, existing string) {
	t.Helper()
	requireCode(t, err, codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS)
	md := errs.Infos(err)[0].GetMetadata()
	require.Equal(t, kind, md["kind"])
	require.Equal(t, existing, md["existing"])
}

func convertNames[T any](rows []T, name func(T) string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = name(r)
	}
	return out
}

func TestReadBackCatalog(t *testing.T) {
	r := replicaWith(t, "w", "v")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)
	for i, p := range []string{"f/sales/a", "f/sales/b", "u/admin/c"} {
		hashes := []string{fmt.Sprintf("%015x%d", i, 1), fmt.Sprintf("%015x%d", i, 2), fmt.Sprintf("%015x%d", i, 3)}
		_, err := r.cat.RegisterScript(service, &policyv1.RegisterScriptRequest{Workspace: "w", Path: p, VersionHashes: hashes, LatestHash: hashes[2],
			ExtraPerms: []*policyv1.ExtraPerm{{Principal: "u/op", Write: i == 0}}})
		require.NoError(t, err)
	}
	_, err := r.cat.RegisterFlow(service, &policyv1.RegisterFlowRequest{Workspace: "w", Path: "f/sales/flow"})
	require.NoError(t, err)
	_, err = r.cat.RegisterApp(service, &policyv1.RegisterAppRequest{Workspace: "v", Path: "f/sales/vapp"})
	require.NoError(t, err)
	wAdmin := userToken(t, r, "w", "admin")
	op := userToken(t, r, "w", "op")

	list := func(ws string, kind policyv1.RunnableKind, prefix string) pager {
		return func(size int32, token string) ([]string, string, error) {
			resp, err := r.cat.ListRunnables(as(wAdmin), &policyv1.ListRunnablesRequest{Workspace: ws, Kind: kind, PathPrefix: prefix, PageSize: size, PageToken: token})
			return convertNames(resp.GetRunnables(), func(x *policyv1.Runnable) string { return x.GetKind().String() + " " + x.GetPath() }),
				resp.GetNextPageToken(), err
		}
	}
	require.Equal(t, []string{"RUNNABLE_KIND_FLOW f/sales/flow", "RUNNABLE_KIND_SCRIPT f/sales/a", "RUNNABLE_KIND_SCRIPT f/sales/b",
		"RUNNABLE_KIND_SCRIPT u/admin/c"}, requirePaging(t, list("w", 0, "")), "w's catalog only, by (kind, path)")
	require.Equal(t, []string{"RUNNABLE_KIND_SCRIPT f/sales/a", "RUNNABLE_KIND_SCRIPT f/sales/b"},
		requirePaging(t, list("w", policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT, "f/sales/")))
	rows, _, err := list("w", 0, "f/%")(0, "")
	require.NoError(t, err)
	require.Empty(t, rows, "a prefix is a prefix, not a LIKE pattern")
	_, other, err := list("w", 0, "f/")(1, "")
	require.NoError(t, err)
	requireBadPages(t, list("w", 0, ""), other)
	_, _, err = list("v", 0, "")(0, "")
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE)
	_, err = r.cat.ListRunnables(as(op), &policyv1.ListRunnablesRequest{Workspace: "w"})
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)

	got, err := r.cat.GetRunnable(as(wAdmin), &policyv1.GetRunnableRequest{Workspace: "w", Kind: policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT, Path: "f/sales/a"})
	require.NoError(t, err)
	require.Equal(t, "0000000000000003", got.GetRunnable().GetLatestHash())
	require.Len(t, got.GetExtraPerms(), 1)
	require.True(t, got.GetExtraPerms()[0].GetWrite())
	_, err = r.cat.GetRunnable(service, &policyv1.GetRunnableRequest{Workspace: "w", Kind: policyv1.RunnableKind_RUNNABLE_KIND_APP, Path: "f/sales/vapp"})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)

	// ListReadable pages too, under the read rule: op reads the three scripts it has extra
	// perms on, nothing of v's; a token of the admin's listing does not page op's.
	readable := func(token, username string) pager {
		return func(size int32, page string) ([]string, string, error) {
			resp, err := r.cat.ListReadable(as(token), &policyv1.ListReadableRequest{Workspace: "w", Username: username, PageSize: size, PageToken: page})
			return convertNames(resp.GetRunnables(), (*policyv1.Runnable).GetPath), resp.GetNextPageToken(), err
		}
	}
	require.Equal(t, []string{"f/sales/a", "f/sales/b", "u/admin/c"}, requirePaging(t, readable(op, "")))
	_, adminPage, err := readable(serviceToken, "admin")(1, "")
	require.NoError(t, err)
	requireBadPages(t, readable(op, ""), adminPage)

	versions := func(path string) pager {
		return func(size int32, token string) ([]string, string, error) {
			resp, err := r.cat.ListScriptVersions(service, &policyv1.ListScriptVersionsRequest{Workspace: "w", Path: path, PageSize: size, PageToken: token})
			return resp.GetHashes(), resp.GetNextPageToken(), err
		}
	}
	require.Equal(t, []string{"0000000000000011", "0000000000000012", "0000000000000013"}, requirePaging(t, versions("f/sales/b")))
	_, _, err = versions("f/sales/nope")(0, "")
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
}

func TestReadBackRunsAndTokens(t *testing.T) {
	r := replicaWith(t, "w", "v")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)
	member(t, r, "w", "dev", policyv1.Role_ROLE_DEVELOPER)
	member(t, r, "v", "vic", policyv1.Role_ROLE_ADMIN)
	wAdmin, op, dev := userToken(t, r, "w", "admin"), userToken(t, r, "w", "op"), userToken(t, r, "w", "dev")
	vic := userToken(t, r, "v", "vic")

	runs := func(token, ws, permAs string, running bool) pager {
		return func(size int32, page string) ([]string, string, error) {
			resp, err := r.run.ListRuns(as(token), &policyv1.ListRunsRequest{Workspace: ws, PermissionedAs: permAs, RunningOnly: running,
				PageSize: size, PageToken: page})
			return convertNames(resp.GetRuns(), func(x *policyv1.GetRunResponse) string { return x.GetRun().GetJobId() }), resp.GetNextPageToken(), err
		}
	}
	rows, next, err := runs(wAdmin, "w", "", false)(0, "")
	require.NoError(t, err)
	require.Empty(t, rows, "no run yet")
	require.Empty(t, next)

	var jobs []string
	for i, cred := range []string{op, dev, op, dev, op} {
		user := map[bool]string{true: "op", false: "dev"}[i%2 == 0]
		resp, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "w", JobId: nextJob(), PermissionedAs: "u/" + user,
			Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: cred})
		require.NoError(t, err)
		jobs = append(jobs, resp.GetRun().GetJobId())
	}
	vrun, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "v", JobId: nextJob(), PermissionedAs: "u/vic",
		Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: vic})
	require.NoError(t, err)
	_, err = r.run.FinishRun(service, &policyv1.FinishRunRequest{Workspace: "w", JobId: jobs[1]})
	require.NoError(t, err)

	newest := slices.Clone(jobs)
	slices.Reverse(newest)
	require.Equal(t, newest, requirePaging(t, runs(wAdmin, "w", "", false)), "w's runs, newest first")
	require.Equal(t, []string{jobs[4], jobs[2], jobs[0]}, requirePaging(t, runs(serviceToken, "w", "u/op", false)))
	require.Equal(t, []string{jobs[4], jobs[3], jobs[2], jobs[0]}, requirePaging(t, runs(wAdmin, "w", "", true)), "running only")
	_, other, err := runs(wAdmin, "w", "u/op", false)(1, "")
	require.NoError(t, err)
	requireBadPages(t, runs(wAdmin, "w", "", false), other)
	_, _, err = runs(op, "w", "", false)(0, "")
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
	_, _, err = runs(wAdmin, "v", "", false)(0, "")
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE)

	got, err := r.run.GetRun(as(wAdmin), &policyv1.GetRunRequest{Workspace: "w", JobId: jobs[1]})
	require.NoError(t, err)
	require.Equal(t, "dev@x", got.GetRun().GetViewerEmail())
	require.NotNil(t, got.GetFinishTime())
	_, err = r.run.GetRun(service, &policyv1.GetRunRequest{Workspace: "w", JobId: vrun.GetRun().GetJobId()})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
	_, err = r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "w", JobId: jobs[0], PermissionedAs: "u/op",
		Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: op})
	requireExisting(t, err, "run", jobs[0])

	// Tokens: the five above (admin, op, dev in w; vic in v) plus one revoked of op's.
	extra, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "w", Username: "op", Label: "old", ExpiresAt: timestampIn(3600e9)})
	require.NoError(t, err)
	_, err = r.tok.RevokeToken(admin, &policyv1.RevokeTokenRequest{Workspace: "w", TokenId: extra.GetTokenId()})
	require.NoError(t, err)
	tokens := func(token, username string, inactive bool) pager {
		return func(size int32, page string) ([]string, string, error) {
			resp, err := r.tok.ListTokens(as(token), &policyv1.ListTokensRequest{Workspace: "w", Username: username, IncludeInactive: inactive,
				PageSize: size, PageToken: page})
			return convertNames(resp.GetTokens(), func(x *policyv1.TokenInfo) string { return x.GetUsername() }), resp.GetNextPageToken(), err
		}
	}
	require.ElementsMatch(t, []string{"admin", "op", "dev"}, requirePaging(t, tokens(wAdmin, "", false)), "live tokens of w")
	require.ElementsMatch(t, []string{"admin", "op", "op", "dev"}, requirePaging(t, tokens(serviceToken, "", true)))
	require.Equal(t, []string{"op"}, requirePaging(t, tokens(op, "", false)), "a member lists its own")
	require.Equal(t, []string{"op", "op"}, requirePaging(t, tokens(op, "op", true)))
	_, _, err = tokens(op, "dev", false)(0, "")
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
	requireBadPages(t, tokens(wAdmin, "", false), "")

	info, err := r.tok.GetToken(as(op), &policyv1.GetTokenRequest{Workspace: "w", TokenId: extra.GetTokenId()})
	require.NoError(t, err)
	require.Equal(t, "old", info.GetTokenInfo().GetLabel())
	require.NotNil(t, info.GetTokenInfo().GetRevokeTime())
	_, err = r.tok.GetToken(as(dev), &policyv1.GetTokenRequest{Workspace: "w", TokenId: extra.GetTokenId()})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
	_, err = r.tok.GetToken(as(vic), &policyv1.GetTokenRequest{Workspace: "v", TokenId: extra.GetTokenId()})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
}

// TestReadBackEmpty: every List of a workspace with nothing in it answers an empty page with
// no next token (not NotFound, not an error); ListScriptVersions of a script that does not
// exist is NotFound (a script always has a version).
func TestReadBackEmpty(t *testing.T) {
	r := replicaWith(t, "x")
	for name, fetch := range map[string]pager{
		"members of a role no one has": func(size int32, token string) ([]string, string, error) {
			resp, err := r.ws.ListMembers(service, &policyv1.ListMembersRequest{Workspace: "x", Role: policyv1.Role_ROLE_DEVELOPER, PageSize: size, PageToken: token})
			return convertNames(resp.GetMembers(), (*policyv1.Member).GetUsername), resp.GetNextPageToken(), err
		},
		"groups": func(size int32, token string) ([]string, string, error) {
			resp, err := r.ws.ListGroups(service, &policyv1.ListGroupsRequest{Workspace: "x", PageSize: size, PageToken: token})
			return convertNames(resp.GetGroups(), (*policyv1.Group).GetName), resp.GetNextPageToken(), err
		},
		"folders": func(size int32, token string) ([]string, string, error) {
			resp, err := r.ws.ListFolders(service, &policyv1.ListFoldersRequest{Workspace: "x", PageSize: size, PageToken: token})
			return convertNames(resp.GetFolders(), (*policyv1.Folder).GetName), resp.GetNextPageToken(), err
		},
		"runnables": func(size int32, token string) ([]string, string, error) {
			resp, err := r.cat.ListRunnables(service, &policyv1.ListRunnablesRequest{Workspace: "x", PageSize: size, PageToken: token})
			return convertNames(resp.GetRunnables(), (*policyv1.Runnable).GetPath), resp.GetNextPageToken(), err
		},
		"runs": func(size int32, token string) ([]string, string, error) {
			resp, err := r.run.ListRuns(service, &policyv1.ListRunsRequest{Workspace: "x", PageSize: size, PageToken: token})
			return convertNames(resp.GetRuns(), func(x *policyv1.GetRunResponse) string { return x.GetRun().GetJobId() }), resp.GetNextPageToken(), err
		},
		"tokens": func(size int32, token string) ([]string, string, error) {
			resp, err := r.tok.ListTokens(service, &policyv1.ListTokensRequest{Workspace: "x", PageSize: size, PageToken: token})
			return convertNames(resp.GetTokens(), (*policyv1.TokenInfo).GetTokenId), resp.GetNextPageToken(), err
		},
	} {
		for _, size := range []int32{0, 1} {
			rows, next, err := fetch(size, "")
			require.NoError(t, err, name)
			require.Empty(t, rows, name)
			require.Empty(t, next, name)
		}
	}
	_, err := r.cat.ListScriptVersions(service, &policyv1.ListScriptVersionsRequest{Workspace: "x", Path: "u/admin/none"})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
}

// TestListsReadBoundedRows: a filter that matches nothing does not make one call read every
// run (or token) of the workspace: a page reads at most ten times its size plus one (and at
// most 2,000 rows), and answers short, with a token to continue, when the filter left it so.
func TestListsReadBoundedRows(t *testing.T) {
	r := replicaWith(t, "w")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)
	op := userToken(t, r, "w", "op")
	for range 24 { // 25 tokens of op's with the one above
		userToken(t, r, "w", "op")
	}
	for range 25 {
		_, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "w", JobId: nextJob(), PermissionedAs: "u/op",
			Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: op})
		require.NoError(t, err)
	}
	for name, fetch := range map[string]pager{
		"runs": func(size int32, page string) ([]string, string, error) {
			resp, err := r.run.ListRuns(service, &policyv1.ListRunsRequest{Workspace: "w", PermissionedAs: "u/admin", PageSize: size, PageToken: page})
			return convertNames(resp.GetRuns(), func(x *policyv1.GetRunResponse) string { return x.GetRun().GetJobId() }), resp.GetNextPageToken(), err
		},
		"tokens": func(size int32, page string) ([]string, string, error) {
			resp, err := r.tok.ListTokens(service, &policyv1.ListTokensRequest{Workspace: "w", Username: "admin", PageSize: size, PageToken: page})
			return convertNames(resp.GetTokens(), (*policyv1.TokenInfo).GetTokenId), resp.GetNextPageToken(), err
		},
	} {
		var calls, found int
		token := ""
		for {
			rows, next, err := fetch(1, token)
			require.NoError(t, err, name)
			calls++
			found += len(rows)
			if token = next; token == "" {
				break
			}
		}
		require.Zero(t, found, name)
		require.Equal(t, 2, calls, "%s: 25 rows read 20 at a time (10 x (page size 1 + 1)): two calls", name)
	}
	// The same bound with matches: every row found once, in order.
	got := requirePaging(t, func(size int32, page string) ([]string, string, error) {
		resp, err := r.run.ListRuns(service, &policyv1.ListRunsRequest{Workspace: "w", PermissionedAs: "u/op", PageSize: size, PageToken: page})
		return convertNames(resp.GetRuns(), func(x *policyv1.GetRunResponse) string { return x.GetRun().GetJobId() }), resp.GetNextPageToken(), err
	})
	require.Len(t, got, 25)
	// A token forged with the right filters (their digest is no secret) but a key no page ends
	// at is refused, never read as a time or a job id.
	_, err := r.run.ListRuns(service, &policyv1.ListRunsRequest{Workspace: "w", PermissionedAs: "u/op",
		PageToken: paging.Encode("w|u/op|false", "yesterday", "'; DROP TABLE run; --")})
	requireField(t, err, "page_token")
}
