package api

import (
	"time"

	"github.com/millwright/millwright/pkg/errs"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/paging"
	"github.com/millwright/millwright/pkg/validate"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// rule checks one condition: InvalidArgument naming field and rule when ok is false.
func rule(field, name string, ok bool, msg string) error {
	if ok {
		return nil
	}
	return errs.InvalidField(field, name, field+" "+msg)
}

func required(field, v string) error { return validate.Required(field, v) }

// The names every service takes (workspace, username, email, group, folder, path) have their
// one rule in pkg/validate (defined in pkg/names).
func workspace(v string) error { return validate.Workspace("workspace", v) }

var (
	username    = validate.Username
	optUsername = validate.OptionalUsername
	email       = validate.Email
	groupName   = validate.GroupName
	folderName  = validate.FolderName
	path        = validate.Path
)

func hash(field, v string) error {
	return validate.First(required(field, v), rule(field, "hash", rulebook.ValidHash(v), "must be 16 lowercase hex digits"))
}

func principal(field, v string) error {
	_, ok := rulebook.ParsePrincipal(v)
	return rule(field, "principal", ok, "must be u/<username> or g/<group>")
}

func principals(field string, list []string) error {
	return validate.First(validate.MaxItems(field, list, rulebook.MaxListItems),
		validate.Each(field, list, principal))
}

func onBehalfOf(v string) error {
	if v == "" {
		return nil
	}
	return principal("on_behalf_of", v)
}

func extraPerms(list []*policyv1.ExtraPerm) error {
	if err := validate.MaxItems("extra_perms", list, rulebook.MaxListItems); err != nil {
		return err
	}
	seen := map[string]bool{}
	return validate.Each("extra_perms", list, func(f string, p *policyv1.ExtraPerm) error {
		if err := principal(f+".principal", p.GetPrincipal()); err != nil {
			return err
		}
		if seen[p.GetPrincipal()] {
			return rule(f+".principal", "unique", false, "is listed twice")
		}
		seen[p.GetPrincipal()] = true
		return nil
	})
}

func role(field string, r policyv1.Role) error {
	_, ok := roles.fromProto(r)
	return rule(field, validate.RuleOneOf, ok, "must be ROLE_ADMIN, ROLE_DEVELOPER or ROLE_OPERATOR")
}

func kind(field string, k policyv1.RunnableKind, allowUnspecified bool) error {
	if allowUnspecified && k == policyv1.RunnableKind_RUNNABLE_KIND_UNSPECIFIED {
		return nil
	}
	_, ok := kinds.fromProto(k)
	return rule(field, validate.RuleOneOf, ok, "must be a runnable kind")
}

func jobID(field, v string) error {
	return validate.First(required(field, v), rule(field, "uuid", rulebook.ValidJobID(v), "must be a lowercase UUID"))
}

func permissionedAs(v string, origin policyv1.RunOrigin) error {
	if v == "" && origin == policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN {
		return nil // taken from the parent run
	}
	return validate.First(required("permissioned_as", v), principal("permissioned_as", v))
}

// validators returns the registry with one validator per request message.
func validators() *validate.Registry {
	r := validate.NewRegistry()
	readBackValidators(r)
	// WorkspaceService
	validate.Add(r, func(m *policyv1.CreateWorkspaceRequest) error {
		return validate.First(workspace(m.GetWorkspace()), required("name", m.GetName()),
			validate.MaxLen("name", m.GetName(), rulebook.MaxNameLen),
			email("admin_email", m.GetAdminEmail()), username("admin_username", m.GetAdminUsername()))
	})
	validate.Add(r, func(m *policyv1.UpsertMemberRequest) error {
		return validate.First(workspace(m.GetWorkspace()), username("username", m.GetUsername()),
			email("email", m.GetEmail()), role("role", m.GetRole()))
	})
	validate.Add(r, func(m *policyv1.RemoveMemberRequest) error {
		return validate.First(workspace(m.GetWorkspace()), username("username", m.GetUsername()))
	})
	validate.Add(r, func(m *policyv1.UpsertGroupRequest) error {
		return validate.First(workspace(m.GetWorkspace()), groupName("name", m.GetName()),
			validate.MaxItems("members", m.GetMembers(), rulebook.MaxListItems),
			validate.Each("members", m.GetMembers(), username))
	})
	validate.Add(r, func(m *policyv1.DeleteGroupRequest) error {
		return validate.First(workspace(m.GetWorkspace()), groupName("name", m.GetName()))
	})
	validate.Add(r, func(m *policyv1.UpsertFolderRequest) error {
		return validate.First(workspace(m.GetWorkspace()), folderName("name", m.GetName()),
			principals("owners", m.GetOwners()), principals("readers", m.GetReaders()), principals("writers", m.GetWriters()))
	})
	validate.Add(r, func(m *policyv1.DeleteFolderRequest) error {
		return validate.First(workspace(m.GetWorkspace()), folderName("name", m.GetName()))
	})
	validate.Add(r, func(m *policyv1.ResolveTenancyRequest) error {
		if err := workspace(m.GetWorkspace()); err != nil {
			return err
		}
		switch {
		case m.GetEmail() != "" && m.GetUsername() != "":
			return errs.InvalidField("username", "one_of", "set exactly one of email and username")
		case m.GetUsername() != "":
			return username("username", m.GetUsername())
		}
		return email("email", m.GetEmail())
	})
	validate.Add(r, func(*policyv1.GetMembershipSnapshotRequest) error { return nil })

	// CatalogService
	validate.Add(r, func(m *policyv1.RegisterScriptRequest) error {
		if err := validate.First(workspace(m.GetWorkspace()), path("path", m.GetPath()),
			hash("latest_hash", m.GetLatestHash()),
			rule("version_hashes", validate.RuleRequired, len(m.GetVersionHashes()) > 0, "needs at least one hash"),
			validate.MaxItems("version_hashes", m.GetVersionHashes(), rulebook.MaxListItems),
			validate.Each("version_hashes", m.GetVersionHashes(), hash),
			onBehalfOf(m.GetOnBehalfOf()), extraPerms(m.GetExtraPerms())); err != nil {
			return err
		}
		found := false
		for _, h := range m.GetVersionHashes() {
			found = found || h == m.GetLatestHash()
		}
		return rule("version_hashes", "contains_latest", found, "must include latest_hash")
	})
	validate.Add(r, func(m *policyv1.RegisterFlowRequest) error {
		return validate.First(workspace(m.GetWorkspace()), path("path", m.GetPath()),
			onBehalfOf(m.GetOnBehalfOf()), extraPerms(m.GetExtraPerms()))
	})
	validate.Add(r, func(m *policyv1.RegisterAppRequest) error {
		return validate.First(workspace(m.GetWorkspace()), path("path", m.GetPath()),
			onBehalfOf(m.GetOnBehalfOf()), extraPerms(m.GetExtraPerms()))
	})
	validate.Add(r, func(m *policyv1.RemoveRunnableRequest) error {
		return validate.First(workspace(m.GetWorkspace()), kind("kind", m.GetKind(), false), path("path", m.GetPath()))
	})
	validate.Add(r, func(m *policyv1.ListReadableRequest) error {
		return validate.First(workspace(m.GetWorkspace()), optUsername("username", m.GetUsername()), kind("kind", m.GetKind(), true),
			pageSize(m.GetPageSize()))
	})
	validate.Add(r, func(m *policyv1.CheckReadableRequest) error {
		return validate.First(workspace(m.GetWorkspace()), optUsername("username", m.GetUsername()),
			rule("refs", validate.RuleRequired, len(m.GetRefs()) > 0, "needs at least one item"),
			validate.MaxItems("refs", m.GetRefs(), rulebook.MaxListItems),
			validate.Each("refs", m.GetRefs(), func(f string, ref *policyv1.RunnableRef) error {
				return validate.First(kind(f+".kind", ref.GetKind(), false), path(f+".path", ref.GetPath()))
			}))
	})

	// TagService
	validate.Add(r, func(m *policyv1.SetWorkerTagsRequest) error {
		if err := validate.First(workspace(m.GetWorkspace()), validate.MaxItems("tags", m.GetTags(), rulebook.MaxListItems)); err != nil {
			return err
		}
		seen := map[string]bool{}
		return validate.Each("tags", m.GetTags(), func(f string, t *policyv1.WorkerTag) error {
			if err := rule(f+".name", "tag", rulebook.ValidTag(t.GetName()), "must be 1-100 chars of [A-Za-z0-9_.:-]"); err != nil {
				return err
			}
			if seen[t.GetName()] {
				return rule(f+".name", "unique", false, "is listed twice")
			}
			seen[t.GetName()] = true
			return nil
		})
	})
	validate.Add(r, func(m *policyv1.GetWorkerTagsRequest) error { return workspace(m.GetWorkspace()) })
	validate.Add(r, func(m *policyv1.CheckTagsRequest) error {
		return validate.First(workspace(m.GetWorkspace()), optUsername("username", m.GetUsername()),
			validate.MaxItems("tags", m.GetTags(), rulebook.MaxListItems),
			validate.Each("tags", m.GetTags(), func(f, t string) error {
				return rule(f, "tag", rulebook.ValidTag(t), "must be 1-100 chars of [A-Za-z0-9_.:-]")
			}))
	})

	// TokenService
	validate.Add(r, func(m *policyv1.CreateTokenRequest) error {
		if err := validate.First(workspace(m.GetWorkspace()), optUsername("username", m.GetUsername()),
			validate.MaxItems("scopes", m.GetScopes(), rulebook.MaxScopes),
			validate.Each("scopes", m.GetScopes(), func(f, s string) error {
				return rule(f, "scope", rulebook.ValidScope(s), "must look like area:action")
			}),
			validate.MaxLen("label", m.GetLabel(), rulebook.MaxLabelLen),
			rule("expires_at", validate.RuleRequired, m.GetExpiresAt() != nil && m.GetExpiresAt().IsValid(), "is required")); err != nil {
			return err
		}
		exp := m.GetExpiresAt().AsTime()
		return validate.First(rule("expires_at", validate.RuleMin, exp.After(time.Now()), "must be in the future"),
			rule("expires_at", validate.RuleMax, exp.Before(time.Now().Add(rulebook.MaxTokenTTL)), "must be at most 366 days away"))
	})
	validate.Add(r, func(m *policyv1.RevokeTokenRequest) error {
		return validate.First(workspace(m.GetWorkspace()), required("token_id", m.GetTokenId()),
			validate.MaxLen("token_id", m.GetTokenId(), 64))
	})
	validate.Add(r, func(m *policyv1.AuthenticateRequest) error {
		return validate.First(required("token", m.GetToken()), validate.MaxLen("token", m.GetToken(), 512))
	})

	// RunService
	validate.Add(r, func(m *policyv1.RecordRunRequest) error {
		o, ok := origins.fromProto(m.GetOrigin())
		if err := validate.First(workspace(m.GetWorkspace()), jobID("job_id", m.GetJobId()),
			rule("origin", validate.RuleOneOf, ok, "must be a run origin"),
			permissionedAs(m.GetPermissionedAs(), m.GetOrigin()),
			validate.MaxLen("credential", m.GetCredential(), 512)); err != nil {
			return err
		}
		src, _ := rulebook.ViewerSourceOf(o)
		if src == rulebook.ViewerNone {
			return rule("credential", "must_be_empty", m.GetCredential() == "", "must be empty for this origin: the run has no viewer")
		}
		return required("credential", m.GetCredential())
	})
	validate.Add(r, func(m *policyv1.GetRunIdentityRequest) error {
		return validate.MaxLen("job_token", m.GetJobToken(), 512)
	})
	validate.Add(r, func(m *policyv1.FinishRunRequest) error {
		return validate.First(workspace(m.GetWorkspace()), jobID("job_id", m.GetJobId()))
	})
	validate.Add(r, func(m *policyv1.ResultCacheKeyRequest) error {
		if err := validate.First(validate.MaxLen("job_token", m.GetJobToken(), 512),
			required("kind", m.GetKind()), rule("kind", "job_kind", rulebook.ValidJobKind(m.GetKind()), "must be 1-50 chars of [a-z_]"),
			rule("args_json", validate.RuleMax, len(m.GetArgsJson()) <= rulebook.MaxArgsBytes, "is larger than 1 MiB")); err != nil {
			return err
		}
		switch rn := m.GetRunnable().(type) {
		case *policyv1.ResultCacheKeyRequest_ScriptHash:
			if err := hash("script_hash", rn.ScriptHash); err != nil {
				return err
			}
		case *policyv1.ResultCacheKeyRequest_Path:
			if err := path("path", rn.Path); err != nil {
				return err
			}
		default:
			return rule("runnable", validate.RuleRequired, false, "is required: script_hash or path")
		}
		if _, err := rulebook.CanonicalArgs([]byte(m.GetArgsJson())); err != nil {
			return rule("args_json", "json_object", false, "is not a JSON object without duplicate keys: "+err.Error())
		}
		return nil
	})

	// SettingsService
	validate.Add(r, func(m *policyv1.GetOperatorSettingsRequest) error { return workspace(m.GetWorkspace()) })
	validate.Add(r, func(m *policyv1.UpdateOperatorSettingsRequest) error {
		return validate.First(workspace(m.GetWorkspace()), rule("patch", validate.RuleRequired, m.GetPatch() != nil, "is required"))
	})
	validate.Add(r, func(m *policyv1.CheckOperatorCanBuildRequest) error {
		return validate.First(workspace(m.GetWorkspace()), optUsername("username", m.GetUsername()))
	})

	// BuilderService. The documents themselves are judged by the walk (size, depth, shape), so
	// their errors carry a JSON pointer; only the envelope is validated here.
	validate.Add(r, func(m *policyv1.CheckFlowRequest) error {
		return validate.First(workspace(m.GetWorkspace()), optUsername("on_behalf_of", m.GetOnBehalfOf()),
			rule("action", validate.RuleOneOf, m.GetAction() != policyv1.FlowAction_FLOW_ACTION_UNSPECIFIED &&
				policyv1.FlowAction_name[int32(m.GetAction())] != "", "must be SAVE, DRAFT, PREVIEW or DEPENDENCIES"))
	})
	validate.Add(r, func(m *policyv1.CheckAppRequest) error {
		_, ok := deployPaths[m.GetDeployPath()]
		return validate.First(workspace(m.GetWorkspace()), optUsername("on_behalf_of", m.GetOnBehalfOf()),
			rule("deploy_path", validate.RuleOneOf, ok, "must be VALUE, MULTIPART, SOURCE or unset (VALUE)"),
			validate.MaxItems("caller_scopes", m.GetCallerScopes(), rulebook.MaxScopes),
			validate.Each("caller_scopes", m.GetCallerScopes(), func(f, s string) error {
				return rule(f, "scope", s == "*" || rulebook.ValidScope(s), "must look like area:action, or *")
			}))
	})
	validate.Add(r, func(m *policyv1.CheckPreviewRequest) error {
		if err := validate.First(workspace(m.GetWorkspace()), optUsername("on_behalf_of", m.GetOnBehalfOf())); err != nil {
			return err
		}
		switch m.GetTarget().(type) {
		case *policyv1.CheckPreviewRequest_Path:
			return validate.First(required("path", m.GetPath()), validate.MaxLen("path", m.GetPath(), 1024))
		case *policyv1.CheckPreviewRequest_RawCode:
			return nil
		}
		return rule("target", validate.RuleRequired, false, "is required: path or raw_code")
	})

	// EventService
	validate.Add(r, func(m *policyv1.WatchRequest) error {
		return validate.First(validate.MaxItems("kinds", m.GetKinds(), 32),
			validate.Each("kinds", m.GetKinds(), func(f, k string) error {
				return rule(f, validate.RuleOneOf, eventKinds[k], "is not an event kind of the policy stream")
			}))
	})
	return r
}

// eventKinds are the kinds the policy stream carries.
var eventKinds = map[string]bool{
	"member": true, "group": true, "folder": true, "catalog": true, "tag": true,
	"token": true, "run": true, "settings": true,
}

// pageSize checks a List's page_size (pkg/paging); its page_token is checked by the handler,
// against the request's filters.
func pageSize(n int32) error {
	_, err := paging.Size(n)
	return err
}

// readBackValidators are the Get and List requests' (issue 17).
func readBackValidators(r *validate.Registry) {
	validate.Add(r, func(m *policyv1.GetWorkspaceRequest) error { return workspace(m.GetWorkspace()) })
	validate.Add(r, func(m *policyv1.ListWorkspacesRequest) error { return pageSize(m.GetPageSize()) })
	validate.Add(r, func(m *policyv1.GetMemberRequest) error {
		return validate.First(workspace(m.GetWorkspace()), username("username", m.GetUsername()))
	})
	validate.Add(r, func(m *policyv1.ListMembersRequest) error {
		if m.GetRole() != policyv1.Role_ROLE_UNSPECIFIED {
			if err := role("role", m.GetRole()); err != nil {
				return err
			}
		}
		return validate.First(workspace(m.GetWorkspace()), pageSize(m.GetPageSize()))
	})
	validate.Add(r, func(m *policyv1.GetGroupRequest) error {
		return validate.First(workspace(m.GetWorkspace()), groupName("name", m.GetName()))
	})
	validate.Add(r, func(m *policyv1.ListGroupsRequest) error {
		return validate.First(workspace(m.GetWorkspace()), optUsername("member", m.GetMember()), pageSize(m.GetPageSize()))
	})
	validate.Add(r, func(m *policyv1.GetFolderRequest) error {
		return validate.First(workspace(m.GetWorkspace()), folderName("name", m.GetName()))
	})
	validate.Add(r, func(m *policyv1.ListFoldersRequest) error {
		return validate.First(workspace(m.GetWorkspace()), pageSize(m.GetPageSize()))
	})
	validate.Add(r, func(m *policyv1.GetRunnableRequest) error {
		return validate.First(workspace(m.GetWorkspace()), kind("kind", m.GetKind(), false), path("path", m.GetPath()))
	})
	validate.Add(r, func(m *policyv1.ListRunnablesRequest) error {
		return validate.First(workspace(m.GetWorkspace()), kind("kind", m.GetKind(), true),
			validate.MaxLen("path_prefix", m.GetPathPrefix(), 255), pageSize(m.GetPageSize()))
	})
	validate.Add(r, func(m *policyv1.ListScriptVersionsRequest) error {
		return validate.First(workspace(m.GetWorkspace()), path("path", m.GetPath()), pageSize(m.GetPageSize()))
	})
	validate.Add(r, func(m *policyv1.GetRunRequest) error {
		return validate.First(workspace(m.GetWorkspace()), jobID("job_id", m.GetJobId()))
	})
	validate.Add(r, func(m *policyv1.ListRunsRequest) error {
		if m.GetPermissionedAs() != "" {
			if err := principal("permissioned_as", m.GetPermissionedAs()); err != nil {
				return err
			}
		}
		return validate.First(workspace(m.GetWorkspace()), pageSize(m.GetPageSize()))
	})
	validate.Add(r, func(m *policyv1.GetTokenRequest) error {
		return validate.First(workspace(m.GetWorkspace()), required("token_id", m.GetTokenId()),
			validate.MaxLen("token_id", m.GetTokenId(), 64))
	})
	validate.Add(r, func(m *policyv1.ListTokensRequest) error {
		return validate.First(workspace(m.GetWorkspace()), optUsername("username", m.GetUsername()), pageSize(m.GetPageSize()))
	})
}
