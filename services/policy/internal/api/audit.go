package api

import (
	"context"

	"github.com/millwright/millwright/pkg/audit"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// Reasons shared by several RPCs the trail leaves out.
const (
	notAuditedRead    = "a read: grants and refuses nothing"
	notAuditedJobPath = "the job path: the run row is the record (who started it, its recorded viewer, its job token id), " +
		"written in the same transaction; a chained event per run would double the job path's commits (issue 12)"
	notAuditedStream = "a stream of changes already recorded by the RPCs that made them (service token only)"
)

// AuditRules is what the audit trail records of every RPC policy serves (docs/policy.md,
// "Audit trail"): the decisions that grant or refuse and the changes, each under its class
// (which says whether it fails closed), and the reads it leaves out with the reason. The
// completeness test (audit_test.go) walks the registered services, so a new RPC fails it until
// it is listed here.
func AuditRules() audit.Rules {
	change := audit.Mutation(audit.Change)
	builder := audit.Decision(audit.Builder)
	return audit.Rules{
		// Workspaces, members, groups and folders: who may do what.
		policyv1.WorkspaceService_CreateWorkspace_FullMethodName: change,
		policyv1.WorkspaceService_UpsertMember_FullMethodName:    change,
		policyv1.WorkspaceService_RemoveMember_FullMethodName:    change,
		policyv1.WorkspaceService_UpsertGroup_FullMethodName:     change,
		policyv1.WorkspaceService_DeleteGroup_FullMethodName:     change,
		policyv1.WorkspaceService_UpsertFolder_FullMethodName:    change,
		policyv1.WorkspaceService_DeleteFolder_FullMethodName:    change,
		policyv1.WorkspaceService_GetWorkspace_FullMethodName:    audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_ListWorkspaces_FullMethodName:  audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_GetMember_FullMethodName:       audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_ListMembers_FullMethodName:     audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_GetGroup_FullMethodName:        audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_ListGroups_FullMethodName:      audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_GetFolder_FullMethodName:       audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_ListFolders_FullMethodName:     audit.NotAudited(notAuditedRead),
		policyv1.WorkspaceService_ResolveTenancy_FullMethodName: audit.NotAudited("a lookup for another service (service token only): " +
			"the decision it feeds is recorded where it is made (roleset's ResolveConnection records the credential it issues or refuses)"),
		policyv1.WorkspaceService_GetMembershipSnapshot_FullMethodName: audit.NotAudited(notAuditedRead +
			" (the snapshot billing and roleset start their projections from; service token only)"),

		// The catalog.
		policyv1.CatalogService_RegisterScript_FullMethodName:     change,
		policyv1.CatalogService_RegisterFlow_FullMethodName:       change,
		policyv1.CatalogService_RegisterApp_FullMethodName:        change,
		policyv1.CatalogService_RemoveRunnable_FullMethodName:     change,
		policyv1.CatalogService_ListReadable_FullMethodName:       audit.NotAudited(notAuditedRead),
		policyv1.CatalogService_GetRunnable_FullMethodName:        audit.NotAudited(notAuditedRead),
		policyv1.CatalogService_ListRunnables_FullMethodName:      audit.NotAudited(notAuditedRead),
		policyv1.CatalogService_ListScriptVersions_FullMethodName: audit.NotAudited(notAuditedRead),
		// CheckReadable and CheckTags answer allowed or refused: the same path and tag rules the
		// builder checks apply inside CheckFlow, so the same class (and the same failing closed).
		policyv1.CatalogService_CheckReadable_FullMethodName: builder,

		// Worker tags.
		policyv1.TagService_SetWorkerTags_FullMethodName: change,
		policyv1.TagService_GetWorkerTags_FullMethodName: audit.NotAudited(notAuditedRead),
		policyv1.TagService_CheckTags_FullMethodName:     builder,

		// Tokens. CreateToken is a credential: its answer carries the secret, so withholding the
		// answer when the event cannot be written means the token is not issued (the row written
		// holds only the secret's digest, which nobody can present). The handler notes the
		// token's id and the keyed hash of the secret.
		policyv1.TokenService_CreateToken_FullMethodName: audit.Decision(audit.Credential),
		policyv1.TokenService_RevokeToken_FullMethodName: audit.Mutation(audit.Token),
		policyv1.TokenService_GetToken_FullMethodName:    audit.NotAudited(notAuditedRead + " (metadata: the secret is never stored)"),
		policyv1.TokenService_ListTokens_FullMethodName:  audit.NotAudited(notAuditedRead + " (metadata: the secret is never stored)"),
		policyv1.TokenService_Authenticate_FullMethodName: audit.NotAudited("a lookup for another service's authentication " +
			"(service token only, through pkg/policyclient's cache): what the caller then grants or refuses is recorded " +
			"by that service with the identity as its actor; an event per lookup would add a write to every cache miss of every service"),

		// Runs.
		policyv1.RunService_RecordRun_FullMethodName:      audit.NotAudited(notAuditedJobPath),
		policyv1.RunService_FinishRun_FullMethodName:      audit.NotAudited(notAuditedJobPath),
		policyv1.RunService_GetRun_FullMethodName:         audit.NotAudited(notAuditedRead),
		policyv1.RunService_ListRuns_FullMethodName:       audit.NotAudited(notAuditedRead),
		policyv1.RunService_GetRunIdentity_FullMethodName: audit.NotAudited(notAuditedRead + " (the identity recorded with the run)"),
		policyv1.RunService_ResultCacheKey_FullMethodName: audit.NotAudited(notAuditedRead + " (a hash computed from the run's record)"),

		// Operator settings.
		policyv1.SettingsService_GetOperatorSettings_FullMethodName:    audit.NotAudited(notAuditedRead),
		policyv1.SettingsService_UpdateOperatorSettings_FullMethodName: audit.Mutation(audit.Settings),
		policyv1.SettingsService_CheckOperatorCanBuild_FullMethodName:  audit.Decision(audit.Operator),

		// The builder checks: the platform asks them on every flow write, preview, dependency job
		// and app deploy (docs/policy.md, BuilderService).
		policyv1.BuilderService_CheckFlow_FullMethodName:    builder,
		policyv1.BuilderService_CheckApp_FullMethodName:     builder,
		policyv1.BuilderService_CheckPreview_FullMethodName: builder,

		policyv1.EventService_Watch_FullMethodName: audit.NotAudited(notAuditedStream),
	}.With(audit.TrailRules()) // pkg/server registers AuditService beside them
}

// noteSecret adds the keyed hash of secret to the call's audit event under key ("redacted"
// when the service runs without --audit-key): an auditor holding a leaked value can find where
// it was issued (HashAuditValue), and the trail never holds it.
func (h *handlers) noteSecret(ctx context.Context, key, secret string) {
	if h.AuditHasher == nil {
		audit.Note(ctx, key, "redacted")
		return
	}
	audit.Note(ctx, key, h.AuditHasher.Hash(secret))
}
