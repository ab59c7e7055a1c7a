package api

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// UserAccess is what a user token needs to call an RPC.
type UserAccess int

const (
	// UserNone: user tokens may not call it.
	UserNone UserAccess = iota
	// UserMember: any enabled member of the workspace the token is bound to.
	UserMember
	// UserAdmin: an enabled admin of that workspace.
	UserAdmin
)

// Rule is who may call one RPC. The superadmin token may call every RPC; everyone else only
// what the rule grants. A user token is bound to its workspace (WRONG_WORKSPACE for another)
// and needs Scope unless it is unrestricted; a job token is bound to its run (the handler
// checks the run).
type Rule struct {
	Service bool // the service token (platform, other millwright services)
	User    UserAccess
	Scope   string // required of a scoped user token
	Job     bool   // the job token of the run the request is about
}

// Rules is the authorization table: every RPC of every policy service, in one place. A method
// missing here is refused (TestEveryMethodHasARule keeps it complete).
var Rules = map[string]Rule{
	policyv1.WorkspaceService_CreateWorkspace_FullMethodName: {},
	policyv1.WorkspaceService_UpsertMember_FullMethodName:    {User: UserAdmin, Scope: "workspace:write"},
	policyv1.WorkspaceService_RemoveMember_FullMethodName:    {User: UserAdmin, Scope: "workspace:write"},
	policyv1.WorkspaceService_UpsertGroup_FullMethodName:     {User: UserAdmin, Scope: "workspace:write"},
	policyv1.WorkspaceService_DeleteGroup_FullMethodName:     {User: UserAdmin, Scope: "workspace:write"},
	policyv1.WorkspaceService_UpsertFolder_FullMethodName:    {User: UserAdmin, Scope: "workspace:write"},
	policyv1.WorkspaceService_DeleteFolder_FullMethodName:    {User: UserAdmin, Scope: "workspace:write"},
	policyv1.WorkspaceService_ResolveTenancy_FullMethodName:  {Service: true},
	// Read-back (issue 17): what a member sees in the product (the workspace, its members,
	// groups and folders) any member may read; every workspace, only the platform.
	policyv1.WorkspaceService_GetWorkspace_FullMethodName:          {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.WorkspaceService_ListWorkspaces_FullMethodName:        {Service: true},
	policyv1.WorkspaceService_GetMember_FullMethodName:             {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.WorkspaceService_ListMembers_FullMethodName:           {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.WorkspaceService_GetGroup_FullMethodName:              {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.WorkspaceService_ListGroups_FullMethodName:            {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.WorkspaceService_GetFolder_FullMethodName:             {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.WorkspaceService_ListFolders_FullMethodName:           {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.WorkspaceService_GetMembershipSnapshot_FullMethodName: {Service: true},

	policyv1.CatalogService_RegisterScript_FullMethodName: {Service: true, User: UserAdmin, Scope: "catalog:write"},
	policyv1.CatalogService_RegisterFlow_FullMethodName:   {Service: true, User: UserAdmin, Scope: "catalog:write"},
	policyv1.CatalogService_RegisterApp_FullMethodName:    {Service: true, User: UserAdmin, Scope: "catalog:write"},
	policyv1.CatalogService_RemoveRunnable_FullMethodName: {Service: true, User: UserAdmin, Scope: "catalog:write"},
	policyv1.CatalogService_ListReadable_FullMethodName:   {Service: true, User: UserMember, Scope: "catalog:read"},
	policyv1.CatalogService_CheckReadable_FullMethodName:  {Service: true, User: UserMember, Scope: "catalog:read"},
	// The whole catalog, unfiltered by the read rule: admins (who read everything anyway).
	// A member reads what it may through ListReadable.
	policyv1.CatalogService_GetRunnable_FullMethodName:        {Service: true, User: UserAdmin, Scope: "catalog:read"},
	policyv1.CatalogService_ListRunnables_FullMethodName:      {Service: true, User: UserAdmin, Scope: "catalog:read"},
	policyv1.CatalogService_ListScriptVersions_FullMethodName: {Service: true, User: UserAdmin, Scope: "catalog:read"},

	policyv1.TagService_SetWorkerTags_FullMethodName: {User: UserAdmin, Scope: "workspace:write"},
	policyv1.TagService_GetWorkerTags_FullMethodName: {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.TagService_CheckTags_FullMethodName:     {Service: true, User: UserMember, Scope: "workspace:read"},

	policyv1.TokenService_CreateToken_FullMethodName:  {User: UserMember, Scope: "tokens:write"},
	policyv1.TokenService_RevokeToken_FullMethodName:  {User: UserMember, Scope: "tokens:write"},
	policyv1.TokenService_Authenticate_FullMethodName: {Service: true},
	// A member reads its own tokens' metadata, an admin every member's (the handler narrows).
	policyv1.TokenService_GetToken_FullMethodName:   {Service: true, User: UserMember, Scope: "tokens:read"},
	policyv1.TokenService_ListTokens_FullMethodName: {Service: true, User: UserMember, Scope: "tokens:read"},

	policyv1.RunService_RecordRun_FullMethodName:      {Service: true},
	policyv1.RunService_GetRunIdentity_FullMethodName: {Service: true, Job: true},
	policyv1.RunService_FinishRun_FullMethodName:      {Service: true},
	policyv1.RunService_ResultCacheKey_FullMethodName: {Service: true, Job: true},
	// Who ran what as whom: the workspace's admins (a job token reads its own run through
	// GetRunIdentity).
	policyv1.RunService_GetRun_FullMethodName:   {Service: true, User: UserAdmin, Scope: "runs:read"},
	policyv1.RunService_ListRuns_FullMethodName: {Service: true, User: UserAdmin, Scope: "runs:read"},

	policyv1.SettingsService_GetOperatorSettings_FullMethodName:    {Service: true, User: UserMember, Scope: "workspace:read"},
	policyv1.SettingsService_UpdateOperatorSettings_FullMethodName: {User: UserAdmin, Scope: "workspace:write"},
	policyv1.SettingsService_CheckOperatorCanBuild_FullMethodName:  {Service: true, User: UserMember, Scope: "workspace:read"},

	policyv1.EventService_Watch_FullMethodName: {Service: true},

	// Builder checks: the platform (service token, naming the user in on_behalf_of) or a member
	// asking for itself. They re-read the catalog under the caller's RLS, hence catalog:read.
	policyv1.BuilderService_CheckFlow_FullMethodName:    {Service: true, User: UserMember, Scope: "catalog:read"},
	policyv1.BuilderService_CheckApp_FullMethodName:     {Service: true, User: UserMember, Scope: "catalog:read"},
	policyv1.BuilderService_CheckPreview_FullMethodName: {Service: true, User: UserMember, Scope: "catalog:read"},
}

// Caller is an authorized caller.
type Caller struct {
	ID      auth.Identity
	Tenancy *rulebook.Tenancy // user tokens: the member, resolved for this call
}

// tenancyStore resolves a member for authorization.
type tenancyStore interface {
	ResolveTenancy(ctx context.Context, ws string, by store.By, value string) (rulebook.Tenancy, error)
}

func denied(reason commonv1.ErrorReason, msg string, md map[string]string) error {
	return errs.New(codes.PermissionDenied, reason, msg, md)
}

// authorize applies Rules to the current call. workspace is the workspace the request names
// ("" for RPCs that name none).
func authorize(ctx context.Context, ts tenancyStore, workspace string) (Caller, error) {
	method, ok := grpc.Method(ctx)
	if !ok {
		return Caller{}, denied(commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, "unknown method", nil)
	}
	return authorizeMethod(ctx, ts, method, workspace)
}

func authorizeMethod(ctx context.Context, ts tenancyStore, method, workspace string) (Caller, error) {
	rule, ok := Rules[method]
	if !ok {
		return Caller{}, denied(commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, "method has no authorization rule", nil)
	}
	id, ok := auth.FromContext(ctx)
	if !ok {
		return Caller{}, auth.Unauthenticated("no identity")
	}
	notAllowed := func() error {
		return denied(commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED,
			"a "+id.Kind.String()+" token may not call this method", map[string]string{"kind": id.Kind.String()})
	}
	switch id.Kind {
	case auth.Superadmin:
		return Caller{ID: id}, nil
	case auth.Service:
		if !rule.Service {
			return Caller{}, notAllowed()
		}
		return Caller{ID: id}, nil
	case auth.Job:
		if !rule.Job {
			return Caller{}, notAllowed()
		}
		if workspace != "" && workspace != id.Workspace {
			return Caller{}, wrongWorkspace()
		}
		return Caller{ID: id}, nil
	case auth.User:
		if rule.User == UserNone {
			return Caller{}, notAllowed()
		}
		if workspace == "" || workspace != id.Workspace {
			return Caller{}, wrongWorkspace()
		}
		if rule.Scope != "" && !id.HasScope(rule.Scope) {
			return Caller{}, denied(commonv1.ErrorReason_ERROR_REASON_MISSING_SCOPE, "token lacks scope "+rule.Scope,
				map[string]string{"scope": rule.Scope})
		}
		t, err := ts.ResolveTenancy(ctx, workspace, store.ByUsername, id.Username)
		switch {
		case errors.Is(err, rulebook.ErrNotMember):
			return Caller{}, auth.Unauthenticated("token's member no longer exists")
		case errors.Is(err, rulebook.ErrMemberDisabled):
			return Caller{}, denied(commonv1.ErrorReason_ERROR_REASON_MEMBER_DISABLED, "member is disabled", nil)
		case err != nil:
			return Caller{}, err
		}
		if rule.User == UserAdmin && !t.IsAdmin() {
			return Caller{}, denied(commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, "workspace admins only",
				map[string]string{"role": string(t.Role)})
		}
		return Caller{ID: id, Tenancy: &t}, nil
	}
	return Caller{}, auth.Unauthenticated("token has no identity")
}

func wrongWorkspace() error {
	return denied(commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE, "token is bound to another workspace", nil)
}

// subject is the member an "acting for" RPC is about: a user token acts only for itself (the
// request's username must be empty or its own); the service and superadmin tokens name one.
func subject(c Caller, requested string) (string, error) {
	if c.ID.Kind == auth.User {
		if requested != "" && requested != c.ID.Username {
			return "", denied(commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, "a user token acts only for its own user", nil)
		}
		return c.ID.Username, nil
	}
	if requested == "" {
		return "", errs.InvalidField("username", "required", "username is required for this caller")
	}
	return requested, nil
}
