package api_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/validate/validatetest"
	"github.com/millwright/millwright/services/policy/internal/api"
)

// Every workspace, username, email and path policy takes is refused, when bad, with the same
// rule as in roleset and billing (their TestSharedFieldRules run the same table).
func TestSharedFieldRules(t *testing.T) {
	const ws, user, mail, path = "w", "alice", "alice@x", "u/alice/s"
	hash := "00000000000000a1"
	bases := []proto.Message{
		&policyv1.CreateWorkspaceRequest{Workspace: ws, Name: "W", AdminEmail: mail, AdminUsername: user},
		&policyv1.UpsertMemberRequest{Workspace: ws, Username: user, Email: mail, Role: policyv1.Role_ROLE_OPERATOR},
		&policyv1.RemoveMemberRequest{Workspace: ws, Username: user},
		&policyv1.UpsertGroupRequest{Workspace: ws, Name: "g"},
		&policyv1.DeleteGroupRequest{Workspace: ws, Name: "g"},
		&policyv1.UpsertFolderRequest{Workspace: ws, Name: "f"},
		&policyv1.DeleteFolderRequest{Workspace: ws, Name: "f"},
		&policyv1.ResolveTenancyRequest{Workspace: ws, Email: mail},
		&policyv1.ResolveTenancyRequest{Workspace: ws, Username: user},
		&policyv1.RegisterScriptRequest{Workspace: ws, Path: path, LatestHash: hash, VersionHashes: []string{hash}},
		&policyv1.RegisterFlowRequest{Workspace: ws, Path: path},
		&policyv1.RegisterAppRequest{Workspace: ws, Path: path},
		&policyv1.RemoveRunnableRequest{Workspace: ws, Kind: policyv1.RunnableKind_RUNNABLE_KIND_FLOW, Path: path},
		&policyv1.ListReadableRequest{Workspace: ws, Username: user},
		&policyv1.CheckReadableRequest{Workspace: ws, Username: user,
			Refs: []*policyv1.RunnableRef{{Kind: policyv1.RunnableKind_RUNNABLE_KIND_FLOW, Path: path}}},
		&policyv1.SetWorkerTagsRequest{Workspace: ws},
		&policyv1.GetWorkerTagsRequest{Workspace: ws},
		&policyv1.CheckTagsRequest{Workspace: ws, Username: user},
		&policyv1.CreateTokenRequest{Workspace: ws, Username: user, ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))},
		&policyv1.RevokeTokenRequest{Workspace: ws, TokenId: "t"},
		&policyv1.RecordRunRequest{Workspace: ws, JobId: "00000000-0000-0000-0000-000000000001",
			Origin: policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE, PermissionedAs: "u/alice"},
		&policyv1.FinishRunRequest{Workspace: ws, JobId: "00000000-0000-0000-0000-000000000001"},
		&policyv1.ResultCacheKeyRequest{Kind: "script", ArgsJson: "{}", Runnable: &policyv1.ResultCacheKeyRequest_Path{Path: path}},
		&policyv1.GetOperatorSettingsRequest{Workspace: ws},
		&policyv1.UpdateOperatorSettingsRequest{Workspace: ws, Patch: &policyv1.OperatorSettingsPatch{}},
		&policyv1.CheckOperatorCanBuildRequest{Workspace: ws, Username: user},
		&policyv1.CheckFlowRequest{Workspace: ws, Action: policyv1.FlowAction_FLOW_ACTION_SAVE},
		&policyv1.CheckAppRequest{Workspace: ws, DeployPath: policyv1.DeployPath_DEPLOY_PATH_VALUE},
		&policyv1.CheckPreviewRequest{Workspace: ws, Target: &policyv1.CheckPreviewRequest_RawCode{RawCode: "x"}},
		&policyv1.GetWorkspaceRequest{Workspace: ws},
		&policyv1.GetMemberRequest{Workspace: ws, Username: user},
		&policyv1.ListMembersRequest{Workspace: ws},
		&policyv1.GetGroupRequest{Workspace: ws, Name: "g"},
		&policyv1.ListGroupsRequest{Workspace: ws, Member: user},
		&policyv1.GetFolderRequest{Workspace: ws, Name: "f"},
		&policyv1.ListFoldersRequest{Workspace: ws},
		&policyv1.GetRunnableRequest{Workspace: ws, Kind: policyv1.RunnableKind_RUNNABLE_KIND_FLOW, Path: path},
		&policyv1.ListRunnablesRequest{Workspace: ws},
		&policyv1.ListScriptVersionsRequest{Workspace: ws, Path: path},
		&policyv1.GetRunRequest{Workspace: ws, JobId: "00000000-0000-0000-0000-000000000001"},
		&policyv1.ListRunsRequest{Workspace: ws},
		&policyv1.GetTokenRequest{Workspace: ws, TokenId: "t"},
		&policyv1.ListTokensRequest{Workspace: ws, Username: user},
	}
	optional := "empty means the caller"
	validatetest.Run(t, api.Validators(), api.ServiceDescs, bases, validatetest.Options{
		Other: map[string]string{
			"millwright.policy.v1.CheckPreviewRequest.path": "a preview target may be a hub path or a draft",
		},
		Optional: map[string]string{
			"millwright.policy.v1.ListReadableRequest.username":          optional,
			"millwright.policy.v1.CheckReadableRequest.username":         optional,
			"millwright.policy.v1.CheckTagsRequest.username":             optional,
			"millwright.policy.v1.CreateTokenRequest.username":           optional,
			"millwright.policy.v1.CheckOperatorCanBuildRequest.username": optional,
			"millwright.policy.v1.ResolveTenancyRequest.username":        "one of email and username",
			"millwright.policy.v1.ListTokensRequest.username":            "empty means the caller's own, or every member's",
			"millwright.policy.v1.ListGroupsRequest.member":              "empty means every group",
			"millwright.policy.v1.ResolveTenancyRequest.email":           "one of email and username",
		},
	})
}
