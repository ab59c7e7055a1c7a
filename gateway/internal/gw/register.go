package gw

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

type registration struct {
	service  string // full proto name; a test checks every service with HTTP rules is listed
	upstream string // byService: every upstream serves it, and the route's service field picks one
	register func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error
}

// byService is the upstream of a service every upstream serves (AuditService): the request's
// service field names the one to call (auditRouter).
const byService = "*"

// registrations lists every service the gateway proxies, by the upstream that serves it.
var registrations = []registration{
	{"millwright.policy.v1.EventService", "policy", policyv1.RegisterEventServiceHandler},
	{"millwright.policy.v1.WorkspaceService", "policy", policyv1.RegisterWorkspaceServiceHandler},
	{"millwright.policy.v1.CatalogService", "policy", policyv1.RegisterCatalogServiceHandler},
	{"millwright.policy.v1.TagService", "policy", policyv1.RegisterTagServiceHandler},
	{"millwright.policy.v1.TokenService", "policy", policyv1.RegisterTokenServiceHandler},
	{"millwright.policy.v1.RunService", "policy", policyv1.RegisterRunServiceHandler},
	{"millwright.policy.v1.SettingsService", "policy", policyv1.RegisterSettingsServiceHandler},
	{"millwright.policy.v1.BuilderService", "policy", policyv1.RegisterBuilderServiceHandler},
	{"millwright.roleset.v1.EventService", "roleset", rolesetv1.RegisterEventServiceHandler},
	{"millwright.roleset.v1.ClusterService", "roleset", rolesetv1.RegisterClusterServiceHandler},
	{"millwright.roleset.v1.RoleService", "roleset", rolesetv1.RegisterRoleServiceHandler},
	{"millwright.roleset.v1.DatatableService", "roleset", rolesetv1.RegisterDatatableServiceHandler},
	{"millwright.roleset.v1.ConnectionService", "roleset", rolesetv1.RegisterConnectionServiceHandler},
	{"millwright.billing.v1.EventService", "billing", billingv1.RegisterEventServiceHandler},
	{"millwright.billing.v1.BillingService", "billing", billingv1.RegisterBillingServiceHandler},
	{"millwright.audit.v1.AuditService", byService, nil},
}
