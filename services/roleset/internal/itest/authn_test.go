package itest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/roleset/internal/api"
	"github.com/millwright/millwright/services/roleset/internal/app"
)

// TestEveryRPCRefusesUserAndJobTokens calls the handler of every method of every roleset
// service (walked from the service descriptors, so a new RPC is included without editing
// this test) with a user identity and a job identity, as the server's authenticator now
// produces them from policy's tokens: each must answer PermissionDenied ROLE_NOT_ALLOWED
// naming the token kind, before touching anything (the engine is nil: a handler that gets
// past its check panics). The two public ConnectionService methods take the job token as
// their request's bearer and are decided by the engine (rules_test.go and others).
func TestEveryRPCRefusesUserAndJobTokens(t *testing.T) {
	public := map[string]bool{}
	for _, m := range api.PublicMethods {
		public[m] = true
	}
	h := &api.Server{}
	ids := []auth.Identity{
		{Kind: auth.User, Workspace: "acme", Username: "boss", Scopes: []string{auth.ScopeAll}, TokenID: "t1"},
		{Kind: auth.Job, Workspace: "acme", Username: "boss", JobID: "j1", TokenID: "t2"},
	}
	descs := []grpc.ServiceDesc{rolesetv1.ClusterService_ServiceDesc, rolesetv1.RoleService_ServiceDesc,
		rolesetv1.DatatableService_ServiceDesc, rolesetv1.ConnectionService_ServiceDesc, rolesetv1.EventService_ServiceDesc}
	var walked int
	for full, call := range servicetest.Handlers(h, descs...) {
		if public[full] {
			continue
		}
		for _, id := range ids {
			walked++
			t.Run(id.Kind.String()+" "+full, func(t *testing.T) {
				servicetest.RequireNotAllowed(t, call(t, auth.WithIdentity(context.Background(), id)), id.Kind, "superadmin,service")
			})
		}
	}
	require.Equal(t, 2*(3+6+5+1), walked, "every non-public method of the five services, for both kinds")
}

// ---- against the real policy ----

const serviceToken = "test-service-token"

// policyOptions runs the real policy with this package's config tokens, unpriced.
var policyOptions = servicetest.PolicyOptions{AdminToken: adminToken, ServiceToken: serviceToken}

// startRoleset runs the real roleset server (app.Serve: its authenticator, interceptors and
// background loops) against policy; it returns the gRPC and metrics addresses.
func startRoleset(t *testing.T, policyAddr string) (string, string) {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	grpcAddr, metricsAddr := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	// Secrets come from the environment: roleset refuses them as flags.
	t.Setenv("DATABASE_URL", pgtest.NewDatabase(t, "roleset", migrator))
	t.Setenv("MILLWRIGHT_ENCRYPTION_KEY", "k1:"+base64.StdEncoding.EncodeToString(key))
	t.Setenv("MILLWRIGHT_ADMIN_TOKEN", adminToken)
	t.Setenv("MILLWRIGHT_SERVICE_TOKEN", serviceToken)
	args := []string{"--grpc-addr", grpcAddr, "--metrics-addr", metricsAddr,
		"--instance-id", "inst-" + randHex(4), "--policy-addr", policyAddr, "--log-level", "error",
		"--shutdown-timeout", "1s"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return grpcAddr, metricsAddr
}

// TestTokensThroughPolicy runs the real roleset server against the real policy binary: the
// config tokens work as before; policy's user and job tokens authenticate (through policy,
// cached) and are refused with PermissionDenied on the admin RPCs, a workspace admin's
// included; a revoked token and a finished run's token are refused with Unauthenticated
// within a bounded wait far below the cache's TTL (policy's stream drops the cached identity);
// unknown and malformed tokens are Unauthenticated; the public ConnectionService methods still
// take their job token to the engine.
func TestTokensThroughPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the policy binary")
	}
	policy := servicetest.StartPolicy(t, policyOptions)
	grpcAddr, metricsAddr := startRoleset(t, policy.Addr)
	rcc := dial(t, grpcAddr)
	roles, clusters := rolesetv1.NewRoleServiceClient(rcc), rolesetv1.NewClusterServiceClient(rcc)
	datatables, conns := rolesetv1.NewDatatableServiceClient(rcc), rolesetv1.NewConnectionServiceClient(rcc)
	events := rolesetv1.NewEventServiceClient(rcc)
	listRoles := func(token string) error {
		_, err := roles.ListRoles(servicetest.Bearer(token), &rolesetv1.ListRolesRequest{ClusterId: "c1"})
		if status.Code(err) == codes.NotFound {
			return nil // allowed, and there is no such cluster
		}
		return err
	}
	require.Eventually(t, func() bool { return listRoles(adminToken) == nil }, 30*time.Second, 50*time.Millisecond, "roleset did not come up")
	acme := policy.Accounts(t, policyOptions)

	t.Run("who gets what on an admin RPC", func(t *testing.T) {
		// A config token passes; a policy token is known but not allowed on an admin RPC.
		want := map[servicetest.Kind]codes.Code{servicetest.KindSuperadmin: codes.OK, servicetest.KindService: codes.OK,
			servicetest.KindNone: codes.Unauthenticated, servicetest.KindUser: codes.PermissionDenied, servicetest.KindJob: codes.PermissionDenied}
		for _, tc := range acme.TokenCases(adminToken, serviceToken) {
			t.Run(tc.Name, func(t *testing.T) {
				code := want[tc.Kind]
				calls := map[string]func() error{
					"ListRoles": func() error { return listRoles(tc.Token) },
					"ListClusters": func() error {
						return servicetest.Err(clusters.ListClusters(servicetest.Bearer(tc.Token), &rolesetv1.ListClustersRequest{}))
					},
					"GetPermissions": func() error {
						return allowedNotFound(datatables.GetPermissions(servicetest.Bearer(tc.Token), &rolesetv1.GetPermissionsRequest{Workspace: "acme", Name: "main"}))
					},
					"GetDatatable": func() error {
						return allowedNotFound(datatables.GetDatatable(servicetest.Bearer(tc.Token), &rolesetv1.GetDatatableRequest{Workspace: "acme", Name: "main"}))
					},
					"ListDatatables": func() error {
						return servicetest.Err(datatables.ListDatatables(servicetest.Bearer(tc.Token), &rolesetv1.ListDatatablesRequest{Workspace: "acme"}))
					},
					"GetCluster": func() error {
						return allowedNotFound(clusters.GetCluster(servicetest.Bearer(tc.Token), &rolesetv1.GetClusterRequest{ClusterId: "c1"}))
					},
					"GetRole": func() error {
						return allowedNotFound(roles.GetRole(servicetest.Bearer(tc.Token), &rolesetv1.GetRoleRequest{RoleId: "1"}))
					},
					"Watch": func() error {
						return servicetest.WatchAnswer(tc.Token, func(ctx context.Context) (rolesetv1.EventService_WatchClient, error) {
							return events.Watch(ctx, &rolesetv1.WatchRequest{})
						})
					},
				}
				for name, call := range calls {
					err := call()
					require.Equal(t, code, status.Code(err), "%s: %v", name, err)
					switch tc.Kind {
					case servicetest.KindSuperadmin, servicetest.KindService: // the code is the whole expectation
					case servicetest.KindUser:
						servicetest.RequireNotAllowed(t, err, auth.User, "superadmin,service")
					case servicetest.KindJob:
						servicetest.RequireNotAllowed(t, err, auth.Job, "superadmin,service")
					case servicetest.KindNone:
						reason, _ := errs.Reason(err)
						require.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, reason, name)
					}
				}
			})
		}
	})

	t.Run("public methods still take the job token to the engine", func(t *testing.T) {
		_, err := conns.ResolveConnection(context.Background(), &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main"})
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
		// The engine asked policy for the run and then found no data table: the token was
		// neither refused by the server's authenticator nor taken for an admin.
		_, err = conns.ResolveConnection(servicetest.Bearer(acme.Job), &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main"})
		require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
		for name, tok := range map[string]string{"the admin token": adminToken, "a user token": acme.Boss.GetToken()} {
			_, err = conns.ResolveConnection(servicetest.Bearer(tok), &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main"})
			require.Equal(t, codes.Unauthenticated, status.Code(err), "%s is no job token: %v", name, err)
		}
	})

	t.Run("the audit trail is on: the refusals above are in it, read with AuditService", func(t *testing.T) {
		res, err := auditv1.NewAuditServiceClient(rcc).ListAuditEvents(servicetest.Bearer(adminToken), &auditv1.ListAuditEventsRequest{
			Rpc: rolesetv1.ConnectionService_ResolveConnection_FullMethodName, Outcome: "refused"})
		require.NoError(t, err)
		rules := map[string]bool{}
		for _, e := range res.GetEvents() {
			require.Equal(t, "roleset", e.GetService())
			require.Equal(t, "credential", e.GetClass())
			rules[e.GetRule()] = true
		}
		require.Equal(t, map[string]bool{commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED.String(): true,
			commonv1.ErrorReason_ERROR_REASON_NOT_FOUND.String(): true}, rules)
	})

	acme.RevocationReaches(t, metricsAddr, "millwright_roleset_token_cache_entries", adminToken, listRoles)
}

// allowedNotFound is a read's answer with NotFound taken as allowed (the call passed its
// authorization and found no such object); any other error as it is.
func allowedNotFound[T any](_ T, err error) error {
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}
