package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/paging"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/roleset/internal/datatableref"
	"github.com/millwright/millwright/services/roleset/internal/engine"
	"github.com/millwright/millwright/services/roleset/internal/rolename"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Server implements every roleset service.
type Server struct {
	rolesetv1.UnimplementedClusterServiceServer
	rolesetv1.UnimplementedRoleServiceServer
	rolesetv1.UnimplementedDatatableServiceServer
	rolesetv1.UnimplementedConnectionServiceServer
	rolesetv1.UnimplementedEventServiceServer

	Engine *engine.Engine
	Stream *stream.Stream // nil: Watch is unavailable
	// Audit is the trail the server's audit step writes to (nil: none); ResolveConnection
	// records the caller's job token as its keyed hash (noteJobToken).
	Audit *audit.Recorder
}

// Register registers every service on s.
func (h *Server) Register(s *grpc.Server) {
	rolesetv1.RegisterClusterServiceServer(s, h)
	rolesetv1.RegisterRoleServiceServer(s, h)
	rolesetv1.RegisterDatatableServiceServer(s, h)
	rolesetv1.RegisterConnectionServiceServer(s, h)
	rolesetv1.RegisterEventServiceServer(s, h)
}

// PublicMethods need no token from the server's authenticator: ConnectionService's bearer is a
// job token, which the engine authenticates through policy (and caches, so the warm path makes
// no call).
var PublicMethods = []string{
	rolesetv1.ConnectionService_ResolveConnection_FullMethodName,
	rolesetv1.ConnectionService_ExplainConnection_FullMethodName,
}

// requireAdmin is the rule of every roleset RPC except the two public ones: the superadmin
// token (the installation's operator) and the service token (the platform) only. The server
// authenticates user and job tokens too (through policy), and refuses them here on purpose:
// clusters, roles and data table permissions are installation configuration with no
// per-workspace rule yet, and a job reaches its data tables only through ResolveConnection.
// docs/roleset.md ("Authorization") is the table; TestEveryRPCRefusesUserAndJobTokens walks
// every method of every roleset service, so a new RPC that forgets this check fails it.
func requireAdmin(ctx context.Context) error {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return auth.Unauthenticated("no identity")
	}
	if id.Kind == auth.Superadmin || id.Kind == auth.Service {
		return nil
	}
	return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED,
		"a "+id.Kind.String()+" token may not call this method: it needs the superadmin or service token",
		map[string]string{"kind": id.Kind.String(), "allowed": "superadmin,service"})
}

// asAdmin is the shape of every admin RPC: the superadmin or service token only (requireAdmin,
// its refusal as is), then the engine call, whose error mapError turns into a status.
func asAdmin[T any](ctx context.Context, call func() (T, error)) (T, error) {
	if err := requireAdmin(ctx); err != nil {
		var zero T
		return zero, err
	}
	v, err := call()
	return v, mapError(ctx, err)
}

// mapError turns core and store errors into statuses; anything else is rewritten by errs. Each
// core Code is mapped deliberately (TestEveryCoreCodeIsMapped): a Code this switch does not
// name is an internal error, never a refusal that reads like a decision.
func mapError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce *engine.Error
	if errors.As(err, &ce) {
		return mapCoreError(ctx, ce)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errs.New(codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, "not found", nil)
	case errors.Is(err, store.ErrAlreadyExists):
		return errs.New(codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS, "already exists", nil)
	}
	return errs.RewriteError(ctx, err)
}

func mapCoreError(ctx context.Context, ce *engine.Error) error {
	var (
		code codes.Code
		R    commonv1.ErrorReason
		md   map[string]string
	)
	switch ce.Code {
	case engine.CodeInvalid:
		return errs.InvalidField(ce.Field, ce.Rule, ce.Msg)
	case engine.CodeUnauthenticated:
		return auth.Unauthenticated(ce.Msg)
	case engine.CodeMalformedReference:
		code, R = codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE
		md = map[string]string{"rule": ce.Rule, "field": ce.Field}
	case engine.CodeReservedName:
		code, R = codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_RESERVED_NAME
		md = map[string]string{"rule": ce.Rule, "field": ce.Field}
	case engine.CodeNotFound:
		code, R = codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND
		md = map[string]string{"kind": ce.Kind}
	case engine.CodeAlreadyExists:
		return errs.AlreadyExists(ce.Kind, ce.Existing, ce.Msg)
	case engine.CodeNoViewer:
		code, R = codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_VIEWER
	case engine.CodeNoRole, engine.CodeNotMember:
		code, R = codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_ROLE
	case engine.CodeRoleDisabled:
		code, R = codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_DISABLED
	// Permanent states of the target cluster: FailedPrecondition with their own reasons, never
	// CONFLICT_RETRY (a retry would meet the same role).
	case engine.CodeNotOurs:
		code, R = codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_NOT_OURS
		md = map[string]string{"role": ce.Field}
	case engine.CodeViewerAccessOff:
		code, R = codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_VIEWER_ACCESS_OFF
		md = map[string]string{"datatable": ce.Field}
	case engine.CodeProxyOff:
		code, R = codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_PROXY_NOT_CONFIGURED
		md = map[string]string{"datatable": ce.Field}
	case engine.CodeTampered:
		code, R = codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_TAMPERED
		md = map[string]string{"role": ce.Field, "check": ce.Rule}
	default:
		return errs.RewriteError(ctx, fmt.Errorf("core error code %d has no gRPC mapping: %w", ce.Code, ce))
	}
	return errs.New(code, R, ce.Msg, md)
}

// ---- clusters ----

func clusterToProto(c store.Cluster) *rolesetv1.Cluster {
	return &rolesetv1.Cluster{ClusterId: c.ID, Host: c.Host, Port: int32(c.Port), MaintenanceDatabase: c.MaintenanceDB,
		AdminUser: c.AdminUser, CreateTime: timestamppb.New(c.CreatedAt)}
}

// UpsertCluster implements ClusterService.
func (h *Server) UpsertCluster(ctx context.Context, req *rolesetv1.UpsertClusterRequest) (*rolesetv1.UpsertClusterResponse, error) {
	c, err := asAdmin(ctx, func() (store.Cluster, error) {
		return h.Engine.UpsertCluster(ctx, engine.ClusterSpec{ID: req.GetClusterId(), Host: req.GetHost(), Port: int(req.GetPort()),
			MaintenanceDB: req.GetMaintenanceDatabase(), AdminUser: req.GetAdminUser(), AdminPassword: req.GetAdminPassword()})
	})
	if err != nil {
		return nil, err
	}
	return &rolesetv1.UpsertClusterResponse{Cluster: clusterToProto(c)}, nil
}

// ListClusters implements ClusterService.
func (h *Server) ListClusters(ctx context.Context, req *rolesetv1.ListClustersRequest) (*rolesetv1.ListClustersResponse, error) {
	return adminList(ctx, req, store.ClusterFilter{}, h.Engine.ListClusters, func(c store.Cluster) string { return c.ID }, clusterToProto,
		func(cs []*rolesetv1.Cluster, next string) *rolesetv1.ListClustersResponse {
			return &rolesetv1.ListClustersResponse{Clusters: cs, NextPageToken: next}
		})
}

// GetCluster implements ClusterService.
func (h *Server) GetCluster(ctx context.Context, req *rolesetv1.GetClusterRequest) (*rolesetv1.GetClusterResponse, error) {
	c, err := asAdmin(ctx, func() (store.Cluster, error) { return h.Engine.Cluster(ctx, req.GetClusterId()) })
	if err != nil {
		return nil, err
	}
	return &rolesetv1.GetClusterResponse{Cluster: clusterToProto(c)}, nil
}

// adminList is the shape of every roleset List: the admin rule (as asAdmin), the request's page
// (pkg/paging, its token bound to the filter f), one read of Limit rows matching f after the
// page's key (one key column: ids and names are unique within every List's filter), the page
// converted and answered.
func adminList[F fmt.Stringer, T, P, R any](ctx context.Context, req paging.Request, f F, read func(context.Context, F, string, int) ([]T, error),
	key func(T) string, conv func(T) P, answer func(page []P, next string) R) (R, error) {
	var zero R
	if err := requireAdmin(ctx); err != nil {
		return zero, err
	}
	pg, err := paging.Parse(req.GetPageSize(), req.GetPageToken(), f.String(), 1)
	if err != nil {
		return zero, err
	}
	var after string
	if pg.After != nil {
		after = pg.After[0]
	}
	rows, err := read(ctx, f, after, pg.Limit())
	if err != nil {
		return zero, mapError(ctx, err)
	}
	rows, next := paging.Next(pg, rows, func(t T) []string { return []string{key(t)} })
	return answer(toProto(rows, conv), next), nil
}

// toProto converts each element of a list answer (nil for none, the repeated field's zero).
func toProto[T, P any](xs []T, conv func(T) P) []P {
	var out []P
	for _, x := range xs {
		out = append(out, conv(x))
	}
	return out
}

// ---- roles ----

func roleToProto(r store.Role) *rolesetv1.Role {
	return &rolesetv1.Role{RoleId: strconv.FormatInt(r.ID, 10), ClusterId: r.ClusterID, Name: r.Name,
		Enabled: r.Enabled && r.State == store.StateReady, Oid: uint32(r.OID), CreateTime: timestamppb.New(r.CreatedAt)}
}

func parseRoleID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, errs.InvalidField("role_id", "role_id", "role_id must be a positive decimal id")
	}
	return id, nil
}

// CreateRole implements RoleService.
func (h *Server) CreateRole(ctx context.Context, req *rolesetv1.CreateRoleRequest) (*rolesetv1.CreateRoleResponse, error) {
	r, err := asAdmin(ctx, func() (store.Role, error) { return h.Engine.CreateRole(ctx, req.GetClusterId(), req.GetName()) })
	if err != nil {
		return nil, err
	}
	return &rolesetv1.CreateRoleResponse{Role: roleToProto(r)}, nil
}

// adminRole starts every RPC on one existing role: the superadmin only, then its role id.
func adminRole(ctx context.Context, roleID string) (int64, error) {
	if err := requireAdmin(ctx); err != nil {
		return 0, err
	}
	return parseRoleID(roleID)
}

// UpdateRole implements RoleService.
func (h *Server) UpdateRole(ctx context.Context, req *rolesetv1.UpdateRoleRequest) (*rolesetv1.UpdateRoleResponse, error) {
	id, err := adminRole(ctx, req.GetRoleId())
	if err != nil {
		return nil, err
	}
	r, err := h.updateRole(ctx, id, req)
	if err != nil {
		return nil, mapError(ctx, err)
	}
	return &rolesetv1.UpdateRoleResponse{Role: roleToProto(r)}, nil
}

// updateRole applies the fields the request sets (a rename first), or reads the role when it
// sets none.
func (h *Server) updateRole(ctx context.Context, id int64, req *rolesetv1.UpdateRoleRequest) (r store.Role, err error) {
	if req.Name == nil && req.Enabled == nil {
		return h.Engine.Role(ctx, id)
	}
	if req.Name != nil {
		if r, err = h.Engine.RenameRole(ctx, id, req.GetName()); err != nil {
			return r, err
		}
	}
	if req.Enabled != nil {
		r, err = h.Engine.SetRoleEnabled(ctx, id, req.GetEnabled())
	}
	return r, err
}

// DeleteRole implements RoleService.
func (h *Server) DeleteRole(ctx context.Context, req *rolesetv1.DeleteRoleRequest) (*rolesetv1.DeleteRoleResponse, error) {
	id, err := adminRole(ctx, req.GetRoleId())
	if err != nil {
		return nil, err
	}
	if err := h.Engine.DeleteRole(ctx, id); err != nil {
		return nil, mapError(ctx, err)
	}
	return &rolesetv1.DeleteRoleResponse{}, nil
}

// ListRoles implements RoleService. Like the other admin reads it lists every role of the
// cluster, whichever instance made it: the catalog is the installation's.
func (h *Server) ListRoles(ctx context.Context, req *rolesetv1.ListRolesRequest) (*rolesetv1.ListRolesResponse, error) {
	f := store.RoleFilter{ClusterID: req.GetClusterId(), Usable: req.Enabled, NamePrefix: req.GetNamePrefix()}
	return adminList(ctx, req, f, h.Engine.ListRoles, func(r store.Role) string { return r.Name }, roleToProto,
		func(rs []*rolesetv1.Role, next string) *rolesetv1.ListRolesResponse {
			return &rolesetv1.ListRolesResponse{Roles: rs, NextPageToken: next}
		})
}

// GetRole implements RoleService: any catalog row, in whatever state, as ListRoles shows it.
func (h *Server) GetRole(ctx context.Context, req *rolesetv1.GetRoleRequest) (*rolesetv1.GetRoleResponse, error) {
	id, err := adminRole(ctx, req.GetRoleId())
	if err != nil {
		return nil, err
	}
	r, err := h.Engine.Role(ctx, id)
	if err != nil {
		return nil, mapError(ctx, err)
	}
	return &rolesetv1.GetRoleResponse{Role: roleToProto(r)}, nil
}

// Sweep implements RoleService.
func (h *Server) Sweep(ctx context.Context, _ *rolesetv1.SweepRequest) (*rolesetv1.SweepResponse, error) {
	res, err := asAdmin(ctx, func() (engine.SweepResult, error) { return h.Engine.Sweep(ctx) })
	if err != nil {
		return nil, err
	}
	return &rolesetv1.SweepResponse{Dropped: res.Dropped, Resumed: res.Resumed}, nil
}

// ---- data tables ----

func checkDefaultRole(v string) error {
	if v == rolename.AdminRole || v == rolename.NoneSentinel {
		return nil
	}
	if _, err := parseRoleID(v); err != nil {
		return errs.InvalidField("default_role", "default_role", `default_role must be a role id, "admin" or "$none"`)
	}
	return nil
}

// UpsertDatatable implements DatatableService.
func (h *Server) UpsertDatatable(ctx context.Context, req *rolesetv1.UpsertDatatableRequest) (*rolesetv1.UpsertDatatableResponse, error) {
	d, err := asAdmin(ctx, func() (store.Datatable, error) {
		return h.Engine.UpsertDatatable(ctx, engine.DatatableSpec{Workspace: req.GetWorkspace(), Name: req.GetName(),
			ClusterID: req.GetClusterId(), Database: req.GetDatabase(), AdminUser: req.GetAdminUser(),
			AdminPassword: req.GetAdminPassword(), DefaultRole: req.GetDefaultRole(), ViewerAccess: req.ViewerAccess,
			CredentialMode: modeFromProto[req.GetCredentialMode()]})
	})
	if err != nil {
		return nil, err
	}
	return &rolesetv1.UpsertDatatableResponse{Datatable: datatableToProto(d)}, nil
}

// datatableToProto is a data table as UpsertDatatable, GetDatatable and ListDatatables answer
// it: never its admin password, and its permissions only through GetPermissions.
func datatableToProto(d store.Datatable) *rolesetv1.Datatable {
	return &rolesetv1.Datatable{Workspace: d.Workspace, Name: d.Name, ClusterId: d.ClusterID, Database: d.Database,
		AdminUser: d.AdminUser, DefaultRole: d.DefaultRole, ViewerAccess: d.ViewerAccess, CredentialMode: modeToProto[d.CredentialMode]}
}

// GetDatatable implements DatatableService.
func (h *Server) GetDatatable(ctx context.Context, req *rolesetv1.GetDatatableRequest) (*rolesetv1.GetDatatableResponse, error) {
	d, err := asAdmin(ctx, func() (store.Datatable, error) { return h.Engine.Datatable(ctx, req.GetWorkspace(), req.GetName()) })
	if err != nil {
		return nil, err
	}
	return &rolesetv1.GetDatatableResponse{Datatable: datatableToProto(d)}, nil
}

// ListDatatables implements DatatableService: one workspace's data tables, as GetPermissions
// and UpsertDatatable name one by workspace.
func (h *Server) ListDatatables(ctx context.Context, req *rolesetv1.ListDatatablesRequest) (*rolesetv1.ListDatatablesResponse, error) {
	f := store.DatatableFilter{Workspace: req.GetWorkspace(), ClusterID: req.GetClusterId(), CredentialMode: modeFromProto[req.GetCredentialMode()]}
	return adminList(ctx, req, f, h.Engine.ListDatatables, func(d store.Datatable) string { return d.Name }, datatableToProto,
		func(ds []*rolesetv1.Datatable, next string) *rolesetv1.ListDatatablesResponse {
			return &rolesetv1.ListDatatablesResponse{Datatables: ds, NextPageToken: next}
		})
}

// The credential modes both ways; UNSPECIFIED maps to "" (keep the stored mode).
var (
	modeFromProto = map[rolesetv1.CredentialMode]string{
		rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT: store.ModeDirect,
		rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY:  store.ModeProxy,
	}
	modeToProto = map[string]rolesetv1.CredentialMode{
		store.ModeDirect: rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT,
		store.ModeProxy:  rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY,
	}
)

func modeOf(proxy bool) rolesetv1.CredentialMode {
	if proxy {
		return rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY
	}
	return rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT
}

func rolesToProto(m map[string][]string) map[string]*rolesetv1.Tenants {
	out := make(map[string]*rolesetv1.Tenants, len(m))
	for k, v := range m {
		out[k] = &rolesetv1.Tenants{Tenants: slices.Clone(v)}
	}
	return out
}

// SetPermissions implements DatatableService.
func (h *Server) SetPermissions(ctx context.Context, req *rolesetv1.SetPermissionsRequest) (*rolesetv1.SetPermissionsResponse, error) {
	roles := make(map[string][]string, len(req.GetRoles()))
	for k, v := range req.GetRoles() {
		roles[k] = v.GetTenants()
	}
	d, err := asAdmin(ctx, func() (store.Datatable, error) {
		return h.Engine.SetPermissions(ctx, req.GetWorkspace(), req.GetName(), req.GetDefaultRole(), roles)
	})
	if err != nil {
		return nil, err
	}
	return &rolesetv1.SetPermissionsResponse{DefaultRole: d.DefaultRole, Roles: rolesToProto(d.Roles)}, nil
}

// GetPermissions implements DatatableService.
func (h *Server) GetPermissions(ctx context.Context, req *rolesetv1.GetPermissionsRequest) (*rolesetv1.GetPermissionsResponse, error) {
	d, err := asAdmin(ctx, func() (store.Datatable, error) { return h.Engine.Datatable(ctx, req.GetWorkspace(), req.GetName()) })
	if err != nil {
		return nil, err
	}
	return &rolesetv1.GetPermissionsResponse{DefaultRole: d.DefaultRole, Roles: rolesToProto(d.Roles)}, nil
}

// ---- connections ----

type refRequest interface {
	GetReference() string
	GetDatatable() string
	GetRole() string
}

// parseRef applies the strict parser: exactly one of reference and datatable(+role).
func parseRef(req refRequest) (datatableref.Ref, error) {
	hasRef := req.GetReference() != ""
	hasAgent := req.GetDatatable() != "" || req.GetRole() != ""
	switch {
	case hasRef && hasAgent:
		return datatableref.Ref{}, errs.New(codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE,
			"send either reference or datatable and role, not both", map[string]string{"rule": "reference_and_fields", "field": "reference"})
	case !hasRef && !hasAgent:
		return datatableref.Ref{}, errs.New(codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE,
			"reference is required", map[string]string{"rule": "required", "field": "reference"})
	}
	var ref datatableref.Ref
	var err error
	if hasRef {
		ref, err = datatableref.Parse(req.GetReference())
	} else {
		ref, err = datatableref.FromAgent(req.GetDatatable(), req.GetRole())
	}
	if err != nil {
		var de *datatableref.Error
		md := map[string]string{"rule": "malformed"}
		if errors.As(err, &de) {
			md = map[string]string{"rule": de.Rule, "field": de.Field}
		}
		return datatableref.Ref{}, errs.New(codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE, err.Error(), md)
	}
	return ref, nil
}

// jobRequest is the start of the two public RPCs: the caller's job token (the engine, not this
// layer, authenticates it) and the data table reference it asks about.
func jobRequest(ctx context.Context, req refRequest) (string, datatableref.Ref, error) {
	token, err := auth.BearerToken(ctx)
	if err != nil {
		return "", datatableref.Ref{}, err
	}
	ref, err := parseRef(req)
	return token, ref, err
}

func kindToProto(k engine.Kind) rolesetv1.ConnectionKind {
	switch k {
	case engine.KindAdmin:
		return rolesetv1.ConnectionKind_CONNECTION_KIND_ADMIN
	case engine.KindRole:
		return rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE
	case engine.KindRoleSet:
		return rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET
	}
	return rolesetv1.ConnectionKind_CONNECTION_KIND_UNSPECIFIED
}

// ResolveConnection implements ConnectionService.
func (h *Server) ResolveConnection(ctx context.Context, req *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error) {
	token, ref, err := jobRequest(ctx, req)
	h.noteJobToken(ctx, token)
	if err != nil {
		return nil, err
	}
	c, err := h.Engine.Resolve(ctx, token, ref)
	if err != nil {
		return nil, mapError(ctx, err)
	}
	h.noteConnection(ctx, c)
	return &rolesetv1.ResolveConnectionResponse{Host: c.Host, Port: int32(c.Port), Database: c.Database, User: c.User,
		Password: c.Password, Roles: c.Roles, Kind: kindToProto(c.Kind), CredentialMode: modeOf(c.Proxy)}, nil
}

func traceToProto(t tenancy.Trace) []*rolesetv1.TraceEntry {
	out := make([]*rolesetv1.TraceEntry, 0, len(t))
	for _, e := range t {
		out = append(out, &rolesetv1.TraceEntry{Role: e.Role, Tenant: e.Tenant, Matched: e.Matched,
			Note: fmt.Sprintf("%s: %s", e.Reason, e.Note)})
	}
	return out
}

// ExplainConnection implements ConnectionService.
func (h *Server) ExplainConnection(ctx context.Context, req *rolesetv1.ExplainConnectionRequest) (*rolesetv1.ExplainConnectionResponse, error) {
	token, ref, err := jobRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	d, err := h.Engine.Decide(ctx, token, ref)
	if err != nil {
		var ce *engine.Error
		if !errors.As(err, &ce) || ce.Code == engine.CodeUnauthenticated || ce.Code == engine.CodeNotFound {
			return nil, mapError(ctx, err)
		}
		st := mapError(ctx, err)
		reason, _ := errs.Reason(st)
		return &rolesetv1.ExplainConnectionResponse{Allowed: false, Reason: reason, Message: ce.Msg, Trace: traceToProto(ce.Trace)}, nil
	}
	return &rolesetv1.ExplainConnectionResponse{Allowed: true, Subject: d.Subject, User: d.Login, Roles: d.Roles,
		Kind: kindToProto(d.Kind), Trace: traceToProto(d.Trace)}, nil
}

// Watch implements EventService.
func (h *Server) Watch(req *rolesetv1.WatchRequest, srv rolesetv1.EventService_WatchServer) error {
	return stream.ServeWatch(h.Stream, req, srv, requireAdmin)
}
