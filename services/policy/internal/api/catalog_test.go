package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

type ref struct {
	kind policyv1.RunnableKind
	path string
}

var (
	rScript = ref{policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT, "u/owner/s"}
	rFlow   = ref{policyv1.RunnableKind_RUNNABLE_KIND_FLOW, "f/fin/report"}
	rApp    = ref{policyv1.RunnableKind_RUNNABLE_KIND_APP, "u/owner/shared"}
	rOther  = ref{policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT, "f/other/x"}
	allRefs = []ref{rScript, rFlow, rApp, rOther}
)

// catalogFixture: owner; freader (reader of f/fin); fwriter (writer through group "writers");
// fowner (owner of f/fin); grouped (in group "analysts", which has a read extra perm on the
// app); direct (a write extra perm on the app); stranger; disabled (a disabled folder reader in
// "analysts").
func catalogFixture(t *testing.T, r *replica) {
	t.Helper()
	workspaceWith(t, r, "w")
	for _, u := range []string{"owner", "freader", "fwriter", "fowner", "grouped", "direct", "stranger", "disabled"} {
		member(t, r, "w", u, policyv1.Role_ROLE_OPERATOR)
	}
	_, err := r.ws.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: "w", Name: "writers", Members: []string{"fwriter"}})
	require.NoError(t, err)
	_, err = r.ws.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: "w", Name: "analysts", Members: []string{"grouped", "disabled"}})
	require.NoError(t, err)
	_, err = r.ws.UpsertFolder(admin, &policyv1.UpsertFolderRequest{Workspace: "w", Name: "fin", Owners: []string{"u/fowner"},
		Readers: []string{"u/freader", "u/disabled"}, Writers: []string{"g/writers"}})
	require.NoError(t, err)
	_, err = r.cat.RegisterScript(service, &policyv1.RegisterScriptRequest{Workspace: "w", Path: rScript.path,
		VersionHashes: []string{"00000000000000a0", "00000000000000a1"}, LatestHash: "00000000000000a1"})
	require.NoError(t, err)
	_, err = r.cat.RegisterFlow(service, &policyv1.RegisterFlowRequest{Workspace: "w", Path: rFlow.path, OnBehalfOf: "u/fowner"})
	require.NoError(t, err)
	_, err = r.cat.RegisterApp(service, &policyv1.RegisterAppRequest{Workspace: "w", Path: rApp.path,
		ExtraPerms: []*policyv1.ExtraPerm{{Principal: "g/analysts"}, {Principal: "u/direct", Write: true}}})
	require.NoError(t, err)
	_, err = r.cat.RegisterScript(service, &policyv1.RegisterScriptRequest{Workspace: "w", Path: rOther.path,
		VersionHashes: []string{"00000000000000b1"}, LatestHash: "00000000000000b1"})
	require.NoError(t, err)
}

// TestReadableByTable proves the read rule from the outside: each user's own token, over
// gRPC, through ListReadable and CheckReadable, against the expected table.
func TestReadableByTable(t *testing.T) {
	r := startReplica(t, testdb.DSN(t))
	catalogFixture(t, r)
	tokens := map[string]string{"admin": userToken(t, r, "w", "admin")}
	for _, u := range []string{"owner", "freader", "fwriter", "fowner", "grouped", "direct", "stranger", "disabled"} {
		tokens[u] = userToken(t, r, "w", u)
	}
	_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "disabled", Email: "disabled@x",
		Role: policyv1.Role_ROLE_OPERATOR, Disabled: true})
	require.NoError(t, err)

	table := []struct {
		user string
		want []ref
	}{
		{"admin", allRefs},
		{"owner", []ref{rScript, rApp}},
		{"freader", []ref{rFlow}},
		{"fwriter", []ref{rFlow}},
		{"fowner", []ref{rFlow}},
		{"grouped", []ref{rApp}},
		{"direct", []ref{rApp}},
		{"stranger", nil},
	}
	for _, tc := range table {
		t.Run(tc.user, func(t *testing.T) {
			ctx := as(tokens[tc.user])
			resp, err := r.cat.ListReadable(ctx, &policyv1.ListReadableRequest{Workspace: "w"})
			require.NoError(t, err)
			var got []ref
			for _, it := range resp.GetRunnables() {
				got = append(got, ref{it.GetKind(), it.GetPath()})
			}
			require.ElementsMatch(t, tc.want, got)
			// Through the service token too: same answer.
			resp, err = r.cat.ListReadable(service, &policyv1.ListReadableRequest{Workspace: "w", Username: tc.user})
			require.NoError(t, err)
			require.Len(t, resp.GetRunnables(), len(tc.want))
			for _, rf := range allRefs {
				_, err := r.cat.CheckReadable(ctx, &policyv1.CheckReadableRequest{Workspace: "w",
					Refs: []*policyv1.RunnableRef{{Kind: rf.kind, Path: rf.path}}})
				readable := false
				for _, w := range tc.want {
					readable = readable || w == rf
				}
				if readable {
					require.NoError(t, err, rf.path)
				} else {
					requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_PATH_NOT_READABLE)
				}
			}
		})
	}
	t.Run("disabled", func(t *testing.T) {
		_, err := r.cat.ListReadable(as(tokens["disabled"]), &policyv1.ListReadableRequest{Workspace: "w"})
		requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		_, err = r.cat.ListReadable(service, &policyv1.ListReadableRequest{Workspace: "w", Username: "disabled"})
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MEMBER_DISABLED)
	})
	t.Run("non-member", func(t *testing.T) {
		_, err := r.cat.ListReadable(service, &policyv1.ListReadableRequest{Workspace: "w", Username: "nobody"})
		requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
	})
	t.Run("one unreadable path in a list refuses the list, naming it", func(t *testing.T) {
		_, err := r.cat.CheckReadable(as(tokens["owner"]), &policyv1.CheckReadableRequest{Workspace: "w", Refs: []*policyv1.RunnableRef{
			{Kind: rScript.kind, Path: rScript.path}, {Kind: rFlow.kind, Path: rFlow.path}}})
		requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_PATH_NOT_READABLE)
		require.Contains(t, err.Error(), rFlow.path)
	})
	t.Run("removing a group member takes the grant away", func(t *testing.T) {
		_, err := r.ws.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: "w", Name: "analysts", Members: []string{"disabled"}})
		require.NoError(t, err)
		resp, err := r.cat.ListReadable(as(tokens["grouped"]), &policyv1.ListReadableRequest{Workspace: "w"})
		require.NoError(t, err)
		require.Empty(t, resp.GetRunnables())
	})
}

func TestResolveTenancy(t *testing.T) {
	r := startReplica(t, testdb.DSN(t))
	catalogFixture(t, r)
	_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "disabled", Email: "disabled@x",
		Role: policyv1.Role_ROLE_OPERATOR, Disabled: true})
	require.NoError(t, err)
	got, err := r.ws.ResolveTenancy(service, &policyv1.ResolveTenancyRequest{Workspace: "w", Email: "fwriter@x"})
	require.NoError(t, err)
	require.Equal(t, "fwriter", got.GetUsername())
	require.Equal(t, []string{"writers"}, got.GetGroups())
	require.Len(t, got.GetFolders(), 1)
	require.True(t, got.GetFolders()[0].GetRead())
	require.True(t, got.GetFolders()[0].GetWrite())
	require.False(t, got.GetFolders()[0].GetOwner())
	require.True(t, got.GetIsOperator())
	require.False(t, got.GetIsAdmin())
	got, err = r.ws.ResolveTenancy(service, &policyv1.ResolveTenancyRequest{Workspace: "w", Email: "admin@x"})
	require.NoError(t, err)
	require.True(t, got.GetIsAdmin())

	_, err = r.ws.ResolveTenancy(service, &policyv1.ResolveTenancyRequest{Workspace: "w", Email: "nobody@x"})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
	_, err = r.ws.ResolveTenancy(service, &policyv1.ResolveTenancyRequest{Workspace: "w", Email: "disabled@x"})
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MEMBER_DISABLED)
	_, err = r.ws.ResolveTenancy(service, &policyv1.ResolveTenancyRequest{Workspace: "nope", Email: "admin@x"})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
}

func TestLastAdminIsKept(t *testing.T) {
	r := replicaWith(t, "w")
	_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "admin", Email: "admin@x", Role: policyv1.Role_ROLE_OPERATOR})
	requireCode(t, err, codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_LAST_ADMIN)
	_, err = r.ws.RemoveMember(admin, &policyv1.RemoveMemberRequest{Workspace: "w", Username: "admin"})
	requireCode(t, err, codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_LAST_ADMIN)
}

func TestWorkerTags(t *testing.T) {
	r := replicaWith(t, "w")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)
	member(t, r, "w", "dev", policyv1.Role_ROLE_DEVELOPER)
	_, err := r.tags.SetWorkerTags(admin, &policyv1.SetWorkerTagsRequest{Workspace: "w", Tags: []*policyv1.WorkerTag{
		{Name: "default"}, {Name: "gpu", Privileged: true}}})
	require.NoError(t, err)
	cases := []struct {
		user string
		tags []string
		tag  string // refused tag, "" = allowed
	}{
		{"op", []string{"default"}, ""},
		{"op", []string{"default", "gpu"}, "gpu"},
		{"dev", []string{"default", "gpu"}, ""},
		{"admin", []string{"gpu"}, ""},
		{"admin", []string{"elsewhere"}, "elsewhere"},
		{"op", nil, ""},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %v", tc.user, tc.tags), func(t *testing.T) {
			_, err := r.tags.CheckTags(service, &policyv1.CheckTagsRequest{Workspace: "w", Username: tc.user, Tags: tc.tags})
			if tc.tag == "" {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_TAG_NOT_ALLOWED)
			require.Contains(t, err.Error(), tc.tag)
		})
	}
}

// TestBadInput: every refusal is InvalidArgument naming the field, and nothing is written
// (the stream head, which every write moves, stays put).
func TestBadInput(t *testing.T) {
	r := replicaWith(t, "w")
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("u%d", i)
	}
	manyHashes := make([]string, 1001)
	for i := range manyHashes {
		manyHashes[i] = fmt.Sprintf("%016x", i)
	}
	script := func(mut func(*policyv1.RegisterScriptRequest)) func() error {
		return func() error {
			req := &policyv1.RegisterScriptRequest{Workspace: "w", Path: "u/admin/s", VersionHashes: []string{"00000000000000a1"}, LatestHash: "00000000000000a1"}
			mut(req)
			_, err := r.cat.RegisterScript(admin, req)
			return err
		}
	}
	cases := []struct {
		name  string
		field string
		call  func() error
	}{
		{"unknown role", "role", func() error {
			_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "x", Email: "x@x"})
			return err
		}},
		{"role out of range", "role", func() error {
			_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "x", Email: "x@x", Role: 42})
			return err
		}},
		{"bad username", "username", func() error {
			_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "Bad Name", Email: "x@x", Role: policyv1.Role_ROLE_ADMIN})
			return err
		}},
		{"bad email", "email", func() error {
			_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "x", Email: "x,y@x", Role: policyv1.Role_ROLE_ADMIN})
			return err
		}},
		{"bad workspace", "workspace", func() error {
			_, err := r.ws.CreateWorkspace(admin, &policyv1.CreateWorkspaceRequest{Workspace: "Bad/WS", Name: "x", AdminEmail: "a@x", AdminUsername: "a"})
			return err
		}},
		{"oversized group", "members", func() error {
			_, err := r.ws.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: "w", Name: "g", Members: many})
			return err
		}},
		{"group name with a comma", "name", func() error {
			_, err := r.ws.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: "w", Name: "a,b"})
			return err
		}},
		{"folder principal without kind", "readers[0]", func() error {
			_, err := r.ws.UpsertFolder(admin, &policyv1.UpsertFolderRequest{Workspace: "w", Name: "f", Readers: []string{"alice"}})
			return err
		}},
		{"oversized folder", "owners", func() error {
			_, err := r.ws.UpsertFolder(admin, &policyv1.UpsertFolderRequest{Workspace: "w", Name: "f", Owners: many})
			return err
		}},
		{"malformed path", "path", script(func(q *policyv1.RegisterScriptRequest) { q.Path = "u/admin" })},
		{"hub path", "path", script(func(q *policyv1.RegisterScriptRequest) { q.Path = "hub/123/x" })},
		{"dot-dot path", "path", script(func(q *policyv1.RegisterScriptRequest) { q.Path = "f/fin/../x" })},
		{"long path", "path", script(func(q *policyv1.RegisterScriptRequest) { q.Path = "u/admin/" + strings.Repeat("a", 250) })},
		{"15-hex hash", "latest_hash", script(func(q *policyv1.RegisterScriptRequest) { q.LatestHash = "00000000000000a" })},
		{"uppercase hash", "version_hashes[0]", script(func(q *policyv1.RegisterScriptRequest) { q.VersionHashes = []string{"00000000000000A1"} })},
		{"non-hex hash", "version_hashes[1]", script(func(q *policyv1.RegisterScriptRequest) {
			q.VersionHashes = []string{"00000000000000a1", "000000000000000g"}
		})},
		{"latest not among versions", "version_hashes", script(func(q *policyv1.RegisterScriptRequest) { q.VersionHashes = []string{"00000000000000a2"} })},
		{"oversized versions", "version_hashes", script(func(q *policyv1.RegisterScriptRequest) { q.VersionHashes = manyHashes })},
		{"bad extra perm", "extra_perms[0].principal", script(func(q *policyv1.RegisterScriptRequest) {
			q.ExtraPerms = []*policyv1.ExtraPerm{{Principal: "x/y"}}
		})},
		{"bad on_behalf_of", "on_behalf_of", script(func(q *policyv1.RegisterScriptRequest) { q.OnBehalfOf = "alice@x" })},
		{"bad tag", "tags[0].name", func() error {
			_, err := r.tags.SetWorkerTags(admin, &policyv1.SetWorkerTagsRequest{Workspace: "w", Tags: []*policyv1.WorkerTag{{Name: "a b"}}})
			return err
		}},
		{"bad scope", "scopes[0]", func() error {
			_, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "w", Username: "admin", Scopes: []string{"ALL"}})
			return err
		}},
		{"token without expiry", "expires_at", func() error {
			_, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "w", Username: "admin"})
			return err
		}},
		{"unknown origin", "origin", func() error {
			_, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "w", JobId: nextJob(), PermissionedAs: "u/admin"})
			return err
		}},
		{"job id not a uuid", "job_id", func() error {
			_, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "w", JobId: "1", PermissionedAs: "u/admin",
				Origin: policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE})
			return err
		}},
		{"too many refs", "refs", func() error {
			refs := make([]*policyv1.RunnableRef, 1001)
			for i := range refs {
				refs[i] = &policyv1.RunnableRef{Kind: policyv1.RunnableKind_RUNNABLE_KIND_FLOW, Path: "u/admin/x"}
			}
			_, err := r.cat.CheckReadable(service, &policyv1.CheckReadableRequest{Workspace: "w", Username: "admin", Refs: refs})
			return err
		}},
		{"settings without patch", "patch", func() error {
			_, err := r.set.UpdateOperatorSettings(admin, &policyv1.UpdateOperatorSettingsRequest{Workspace: "w"})
			return err
		}},
	}
	head := func() int64 {
		// Read through the service's own wiring: the stream head moves on every write.
		h, err := r.parts.Store.Head(t.Context())
		require.NoError(t, err)
		return h
	}
	before := head()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireField(t, tc.call(), tc.field)
		})
	}
	require.Equal(t, before, head(), "a refused request wrote something")
}
