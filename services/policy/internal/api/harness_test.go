package api_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/app"
	"github.com/millwright/millwright/services/policy/internal/settings"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	adminToken   = "test-superadmin-token-0123456789"
	serviceToken = "test-service-token-0123456789abc"
)

// replica is one in-process policy server (real pkg/server, real Postgres).
type replica struct {
	dsn   string // its database, for a test that reads what it wrote
	conn  *grpc.ClientConn
	parts *app.Parts
	ws    policyv1.WorkspaceServiceClient
	cat   policyv1.CatalogServiceClient
	tags  policyv1.TagServiceClient
	tok   policyv1.TokenServiceClient
	run   policyv1.RunServiceClient
	set   policyv1.SettingsServiceClient
	ev    policyv1.EventServiceClient
}

type replicaOpts struct {
	seats  settings.SeatChecker
	tracer pgx.QueryTracer
	poll   time.Duration    // the stream's poll interval (default 200ms)
	clock  func() time.Time // the retention loop's clock (default time.Now)
	// checkBytes and checkWait bound the builder checks in flight (defaults: the service's).
	checkBytes int64
	checkWait  time.Duration
	// audit is the audit trail's configuration (default: server.DefaultAudit(), as the flags'
	// defaults: no key, operator and seats failing open).
	audit *server.AuditConfig
}

func startReplica(t testing.TB, dsn string, ro ...replicaOpts) *replica {
	t.Helper()
	var o replicaOpts
	if len(ro) > 0 {
		o = ro[0]
	}
	if o.poll == 0 {
		o.poll = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	parts := make(chan *app.Parts, 1)
	done := make(chan error, 1)
	cfg := server.Config{Name: "policy", GRPCAddr: "127.0.0.1:0", DatabaseURL: server.DSN(dsn),
		AdminToken: adminToken, ServiceToken: serviceToken, ShutdownTimeout: 2 * time.Second, Audit: server.DefaultAudit()}
	if o.audit != nil {
		cfg.Audit = *o.audit
	}
	go func() {
		done <- app.Run(ctx, cfg, app.Options{
			SeatChecker:        o.seats,
			Tracer:             o.tracer,
			CheckBytesInFlight: o.checkBytes,
			CheckQueueWait:     o.checkWait,
			Clock:              o.clock,
			Stream:             stream.Options{PollInterval: o.poll, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
			Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnListen:           func(g, _ string) { addr <- g },
			OnReady:            func(p *app.Parts) { parts <- p },
		})
	}()
	r := &replica{dsn: dsn}
	select {
	case r.parts = <-parts:
	case err := <-done:
		t.Fatalf("policy did not start: %v", err)
	}
	var a string
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("policy did not listen: %v", err)
	}
	select {
	case <-r.parts.Stream.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("stream not ready")
	}
	conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("policy did not stop")
		}
	})
	r.conn = conn
	r.ws = policyv1.NewWorkspaceServiceClient(conn)
	r.cat = policyv1.NewCatalogServiceClient(conn)
	r.tags = policyv1.NewTagServiceClient(conn)
	r.tok = policyv1.NewTokenServiceClient(conn)
	r.run = policyv1.NewRunServiceClient(conn)
	r.set = policyv1.NewSettingsServiceClient(conn)
	r.ev = policyv1.NewEventServiceClient(conn)
	return r
}

// as returns a context carrying token as the bearer.
func as(token string) context.Context {
	if token == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

var (
	admin   = as(adminToken)
	service = as(serviceToken)
)

// requireCode asserts err's code and, when reason is set, its ErrorInfo reason.
func requireCode(t testing.TB, err error, code codes.Code, reason commonv1.ErrorReason) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, status.Code(err), "error: %v", err)
	if reason != commonv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		got, _ := errs.Reason(err)
		require.Equal(t, reason, got, "error: %v", err)
	}
}

// requireField asserts InvalidArgument naming field.
func requireField(t testing.TB, err error, field string) {
	t.Helper()
	requireCode(t, err, codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
	infos := errs.Infos(err)
	require.NotEmpty(t, infos)
	require.Equal(t, field, infos[0].GetMetadata()["field"], "error: %v", err)
}

func member(t testing.TB, r *replica, ws, user string, role policyv1.Role) {
	t.Helper()
	_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: ws, Username: user, Email: user + "@x", Role: role})
	require.NoError(t, err)
}

// workspaceWith creates each workspace of wss, named as its id, whose first admin is "admin".
func workspaceWith(t testing.TB, r *replica, wss ...string) {
	t.Helper()
	for _, ws := range wss {
		_, err := r.ws.CreateWorkspace(admin, &policyv1.CreateWorkspaceRequest{Workspace: ws, Name: ws, AdminEmail: "admin@x", AdminUsername: "admin"})
		require.NoError(t, err)
	}
}

// replicaWith starts a replica on a new database holding the workspaces wss (workspaceWith).
func replicaWith(t testing.TB, wss ...string) *replica {
	t.Helper()
	r := startReplica(t, testdb.DSN(t))
	workspaceWith(t, r, wss...)
	return r
}

// replicaPair starts two replicas on one new database, with workspace "w" and its operator "op"
// made through a: changes made through one are for the other to see.
func replicaPair(t testing.TB) (a, b *replica) {
	t.Helper()
	dsn := testdb.DSN(t)
	a, b = startReplica(t, dsn), startReplica(t, dsn)
	workspaceWith(t, a, "w")
	member(t, a, "w", "op", policyv1.Role_ROLE_OPERATOR)
	return a, b
}

func userToken(t testing.TB, r *replica, ws, user string, scopes ...string) string {
	t.Helper()
	resp, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: ws, Username: user, Scopes: scopes,
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))})
	require.NoError(t, err)
	return resp.GetToken()
}

func bptr(b bool) *bool { return &b }

func timestampIn(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(d)) }
