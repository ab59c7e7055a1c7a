package api

import (
	"context"
	"strings"

	"github.com/millwright/millwright/pkg/audit"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/engine"
)

// AuditRules is what roleset's audit trail records of each RPC it serves (docs/roleset.md,
// "Audit trail"): every credential decision and every change of clusters, roles, data tables
// and permissions; no read. TestAuditRulesAreComplete fails on an RPC missing here.
func AuditRules() audit.Rules {
	read := func(what string) audit.Rule {
		return audit.NotAudited("a read: " + what + "; it grants nothing and changes nothing")
	}
	return audit.Rules{
		// The one decision that hands out a credential: its login, roles and mode are noted by
		// the handler (ResolveConnection).
		rolesetv1.ConnectionService_ResolveConnection_FullMethodName: audit.Decision(audit.Credential),
		rolesetv1.ConnectionService_ExplainConnection_FullMethodName: read("the decision ResolveConnection would make, without a credential; " +
			"the credential itself is recorded when it is asked for"),

		rolesetv1.ClusterService_UpsertCluster_FullMethodName:     audit.Mutation(audit.Change),
		rolesetv1.RoleService_CreateRole_FullMethodName:           audit.Mutation(audit.Change),
		rolesetv1.RoleService_UpdateRole_FullMethodName:           audit.Mutation(audit.Change),
		rolesetv1.RoleService_DeleteRole_FullMethodName:           audit.Mutation(audit.Change),
		rolesetv1.DatatableService_UpsertDatatable_FullMethodName: audit.Mutation(audit.Change),
		rolesetv1.DatatableService_SetPermissions_FullMethodName:  audit.Mutation(audit.Change),
		// An operator's sweep drops unused set logins from the clusters: a change, and a rare one
		// (the monitor loop's own sweeps are no RPC and are logged and counted instead).
		rolesetv1.RoleService_Sweep_FullMethodName: audit.Mutation(audit.Change),

		rolesetv1.ClusterService_ListClusters_FullMethodName:     read("the registered clusters, for the superadmin or the platform"),
		rolesetv1.RoleService_ListRoles_FullMethodName:           read("a cluster's catalog roles, for the superadmin or the platform"),
		rolesetv1.DatatableService_GetPermissions_FullMethodName: read("a data table's permissions, for the superadmin or the platform"),
		rolesetv1.ClusterService_GetCluster_FullMethodName:       read("one registered cluster, never its password, for the superadmin or the platform"),
		rolesetv1.RoleService_GetRole_FullMethodName:             read("one catalog role, never its password, for the superadmin or the platform"),
		rolesetv1.DatatableService_GetDatatable_FullMethodName:   read("one data table, never its admin password, for the superadmin or the platform"),
		rolesetv1.DatatableService_ListDatatables_FullMethodName: read("a workspace's data tables, never their admin passwords, for the superadmin or the platform"),

		rolesetv1.EventService_Watch_FullMethodName: audit.NotAudited("a stream of cache invalidations for other replicas and services: " +
			"it says what changed, and each change is recorded by the RPC that made it"),
	}.With(audit.TrailRules()) // pkg/server registers AuditService beside them
}

// noteConnection adds to ResolveConnection's audit event what only the handler knows: which
// login was decided and for whom, never the password or the ticket secret.
func (h *Server) noteConnection(ctx context.Context, c engine.Connection) {
	if h.Audit == nil {
		return // no trail: spare the warm path the notes
	}
	audit.Note(ctx, "login", c.Login)
	audit.Note(ctx, "roles", strings.Join(c.Roles, ","))
	audit.Note(ctx, "kind", strings.TrimPrefix(kindToProto(c.Kind).String(), "CONNECTION_KIND_"))
	audit.Note(ctx, "credential_mode", strings.TrimPrefix(modeOf(c.Proxy).String(), "CREDENTIAL_MODE_"))
	audit.Note(ctx, "data_table", c.Workspace+"/"+c.Datatable)
	audit.Note(ctx, "job_id", c.JobID)
	audit.Note(ctx, "subject", c.Subject)
	if c.Proxy {
		audit.Note(ctx, "ticket", c.User) // the ticket's id: the proxy's events name it too
	}
}

// noteJobToken records the caller's job token in ResolveConnection's event as its keyed hash,
// granted or refused: an auditor holding a token finds its decisions with HashAuditValue.
func (h *Server) noteJobToken(ctx context.Context, token string) {
	if h.Audit == nil || token == "" {
		return
	}
	v := "redacted"
	if hs := h.Audit.Hasher(); hs != nil {
		v = hs.Hash(token)
	}
	audit.Note(ctx, "job_token", v)
}
