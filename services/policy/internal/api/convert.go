package api

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// enum maps a proto enum to its domain values, read both ways.
type enum[P, D comparable] map[P]D

func (m enum[P, D]) fromProto(p P) (D, bool) { v, ok := m[p]; return v, ok }

// toProto is the reverse look-up; a domain value the map lacks becomes the proto zero value
// (UNSPECIFIED).
func (m enum[P, D]) toProto(d D) P {
	for p, v := range m {
		if v == d {
			return p
		}
	}
	var unspecified P
	return unspecified
}

var roles = enum[policyv1.Role, rulebook.Role]{
	policyv1.Role_ROLE_ADMIN:     rulebook.RoleAdmin,
	policyv1.Role_ROLE_DEVELOPER: rulebook.RoleDeveloper,
	policyv1.Role_ROLE_OPERATOR:  rulebook.RoleOperator,
}

var kinds = enum[policyv1.RunnableKind, rulebook.Kind]{
	policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT: rulebook.KindScript,
	policyv1.RunnableKind_RUNNABLE_KIND_FLOW:   rulebook.KindFlow,
	policyv1.RunnableKind_RUNNABLE_KIND_APP:    rulebook.KindApp,
}

var origins = enum[policyv1.RunOrigin, rulebook.Origin]{
	policyv1.RunOrigin_RUN_ORIGIN_APP_SESSION:   rulebook.OriginAppSession,
	policyv1.RunOrigin_RUN_ORIGIN_APP_ANONYMOUS: rulebook.OriginAppAnonymous,
	policyv1.RunOrigin_RUN_ORIGIN_DIRECT:        rulebook.OriginDirect,
	policyv1.RunOrigin_RUN_ORIGIN_PREVIEW:       rulebook.OriginPreview,
	policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN:     rulebook.OriginJobToken,
	policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE:      rulebook.OriginSchedule,
	policyv1.RunOrigin_RUN_ORIGIN_TRIGGER:       rulebook.OriginTrigger,
	policyv1.RunOrigin_RUN_ORIGIN_AI_TOOL:       rulebook.OriginAITool,
}

func runToProto(r store.Run) *policyv1.RunIdentity {
	out := &policyv1.RunIdentity{
		Workspace:      r.Workspace,
		JobId:          r.JobID,
		PermissionedAs: r.PermissionedAs,
		Origin:         origins.toProto(r.Origin),
		ParentJobId:    r.ParentJobID,
		CreatedAt:      timestamppb.New(r.CreatedAt),
	}
	if r.Viewer != nil {
		out.HasViewer, out.ViewerEmail = true, *r.Viewer
	}
	return out
}

func settingsToProto(s rulebook.OperatorSettings) *policyv1.OperatorSettings {
	return &policyv1.OperatorSettings{
		Runs: s.Runs, Schedules: s.Schedules, Resources: s.Resources, Variables: s.Variables, Assets: s.Assets,
		AuditLogs: s.AuditLogs, Triggers: s.Triggers, Groups: s.Groups, Folders: s.Folders, Workers: s.Workers,
		Builder: s.Builder, ManageSchedules: s.ManageSchedules, ManageTriggers: s.ManageTriggers,
		StripBuilderSdkReadScopes: s.StripBuilderSDKReadScopes,
	}
}

func patchFromProto(p *policyv1.OperatorSettingsPatch) rulebook.SettingsPatch {
	out := rulebook.SettingsPatch{}
	set := func(k string, v *bool) {
		if v != nil {
			out[k] = *v
		}
	}
	set("runs", p.Runs)
	set("schedules", p.Schedules)
	set("resources", p.Resources)
	set("variables", p.Variables)
	set("assets", p.Assets)
	set("audit_logs", p.AuditLogs)
	set("triggers", p.Triggers)
	set("groups", p.Groups)
	set("folders", p.Folders)
	set("workers", p.Workers)
	set("builder", p.Builder)
	set("manage_schedules", p.ManageSchedules)
	set("manage_triggers", p.ManageTriggers)
	set("strip_builder_sdk_read_scopes", p.StripBuilderSdkReadScopes)
	return out
}

func tenancyToProto(t rulebook.Tenancy) *policyv1.ResolveTenancyResponse {
	out := &policyv1.ResolveTenancyResponse{
		Workspace: t.Workspace, Username: t.Username, Email: t.Email, Groups: t.Groups,
		IsAdmin: t.IsAdmin(), IsOperator: t.IsOperator(), Role: roles.toProto(t.Role),
	}
	for _, f := range t.Folders {
		out.Folders = append(out.Folders, &policyv1.FolderAccess{Name: f.Name, Read: f.Read, Write: f.Write, Owner: f.Owner})
	}
	return out
}

func memberToProto(m store.Member) *policyv1.Member {
	return &policyv1.Member{Workspace: m.Workspace, Username: m.Username, Email: m.Email, Role: roles.toProto(m.Role), Disabled: m.Disabled}
}
