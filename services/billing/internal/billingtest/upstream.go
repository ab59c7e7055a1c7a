package billingtest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/stream"
)

// upstreamSQL mirrors the parts of policy's schema billing depends on, with the same
// stream_emit shapes: member events keyed by username with email, role and disabled in the
// payload; settings events with the operator_settings object.
const upstreamSQL = `-- +goose Up
CREATE TABLE member (
    workspace_id text NOT NULL,
    username     text NOT NULL,
    email        text NOT NULL,
    role         text NOT NULL,
    disabled     boolean NOT NULL DEFAULT false,
    PRIMARY KEY (workspace_id, username)
);
CREATE TRIGGER member_stream AFTER INSERT OR UPDATE OR DELETE ON member
    FOR EACH ROW EXECUTE FUNCTION stream_emit('member', 'workspace_id', 'username', 'email', 'role', 'disabled');
CREATE TABLE workspace_settings (
    workspace_id      text PRIMARY KEY,
    operator_settings jsonb NOT NULL DEFAULT '{}'
);
CREATE TRIGGER settings_stream AFTER INSERT OR UPDATE OR DELETE ON workspace_settings
    FOR EACH ROW EXECUTE FUNCTION stream_emit('settings', 'workspace_id', 'workspace_id', 'operator_settings');
CREATE TABLE token (id text PRIMARY KEY);
CREATE TRIGGER token_stream AFTER INSERT OR UPDATE OR DELETE ON token
    FOR EACH ROW EXECUTE FUNCTION stream_emit('token', '', 'id');
`

func migrateUpstream(ctx context.Context, dsn string) error {
	_, err := migrate.Up(ctx, dsn, fstest.MapFS{"00002_upstream.sql": {Data: []byte(upstreamSQL)}})
	return err
}

// Upstream is a stand-in for policy: a database, its stream, and a gRPC server for Watch and
// GetMembershipSnapshot.
type Upstream struct {
	t    testing.TB
	Pool *pgxpool.Pool

	mu     sync.Mutex
	lis    net.Listener
	addr   string
	srv    *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// NewUpstream starts the stand-in; Stop and Start it to kill streams mid-flight.
func NewUpstream(t testing.TB) *Upstream {
	t.Helper()
	dsn := pgtest.NewDatabase(t, "billing-upstream", migrateUpstream)
	u := &Upstream{t: t, Pool: Pool(t, dsn)}
	u.Start()
	t.Cleanup(u.Stop)
	return u
}

// Addr is the gRPC address (stable across Stop/Start).
func (u *Upstream) Addr() string { return u.addr }

// Conn dials the upstream; closed at cleanup.
func (u *Upstream) Conn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(u.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Start serves on the same address as before (or a new one the first time).
func (u *Upstream) Start() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.srv != nil {
		return
	}
	addr := u.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the old socket may linger for a moment
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(u.t, err)
	u.lis, u.addr = lis, lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	st := stream.New(u.Pool, stream.Options{PollInterval: 50 * time.Millisecond, PruneInterval: -1, HeartbeatInterval: 200 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); _ = st.Run(ctx) }()
	<-st.Ready()
	srv := grpc.NewServer()
	policyv1.RegisterEventServiceServer(srv, &events{st: st})
	policyv1.RegisterWorkspaceServiceServer(srv, &workspaces{pool: u.Pool})
	go func() { _ = srv.Serve(lis) }()
	u.srv, u.cancel, u.done = srv, cancel, done
}

// Stop kills the server abruptly: open streams end with an error mid-flight.
func (u *Upstream) Stop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.srv == nil {
		return
	}
	u.srv.Stop()
	u.cancel()
	<-u.done
	u.srv = nil
}

// UpsertMember writes a member (one event).
func (u *Upstream) UpsertMember(ctx context.Context, ws, username, email, role string, disabled bool) error {
	_, err := u.Pool.Exec(ctx, `
		INSERT INTO member (workspace_id, username, email, role, disabled) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (workspace_id, username) DO UPDATE
		SET email = excluded.email, role = excluded.role, disabled = excluded.disabled`,
		ws, username, email, role, disabled)
	return err
}

// RemoveMember deletes a member (one event).
func (u *Upstream) RemoveMember(ctx context.Context, ws, username string) error {
	_, err := u.Pool.Exec(ctx, `DELETE FROM member WHERE workspace_id = $1 AND username = $2`, ws, username)
	return err
}

// SetBuilder writes a workspace's operator_settings builder key (one event).
func (u *Upstream) SetBuilder(ctx context.Context, ws string, on bool) error {
	_, err := u.Pool.Exec(ctx, `
		INSERT INTO workspace_settings (workspace_id, operator_settings)
		VALUES ($1, jsonb_build_object('runs', true, 'builder', $2::boolean))
		ON CONFLICT (workspace_id) DO UPDATE
		SET operator_settings = workspace_settings.operator_settings || jsonb_build_object('builder', $2::boolean)`,
		ws, on)
	return err
}

// Noise writes an event of a kind billing ignores.
func (u *Upstream) Noise(ctx context.Context, id string) error {
	_, err := u.Pool.Exec(ctx, `INSERT INTO token (id) VALUES ($1)`, id)
	return err
}

// Head is the stream head.
func (u *Upstream) Head(ctx context.Context) (int64, error) { return stream.Head(ctx, u.Pool) }

// Prune deletes every outbox row up to the head, as retention would, so a consumer behind it
// must resync.
func (u *Upstream) Prune(ctx context.Context) error {
	_, err := u.Pool.Exec(ctx, `
		WITH d AS (DELETE FROM stream_outbox RETURNING id)
		UPDATE stream_state SET pruned_through = greatest(pruned_through, (SELECT coalesce(max(id), 0) FROM d))`)
	return err
}

type events struct {
	policyv1.UnimplementedEventServiceServer
	st *stream.Stream
}

func (e *events) Watch(req *policyv1.WatchRequest, srv grpc.ServerStreamingServer[policyv1.WatchResponse]) error {
	return e.st.Watch(srv.Context(), req.GetAfterId(), req.GetKinds(), func(ev *stream.Event, head int64) error {
		return srv.Send(&policyv1.WatchResponse{Event: stream.ToProto(ev), HeadId: head})
	})
}

type workspaces struct {
	policyv1.UnimplementedWorkspaceServiceServer
	pool *pgxpool.Pool
}

var roles = map[string]policyv1.Role{"admin": policyv1.Role_ROLE_ADMIN, "developer": policyv1.Role_ROLE_DEVELOPER, "operator": policyv1.Role_ROLE_OPERATOR}

func (w *workspaces) GetMembershipSnapshot(ctx context.Context, _ *policyv1.GetMembershipSnapshotRequest) (*policyv1.GetMembershipSnapshotResponse, error) {
	// The head first, then the snapshot (as policy's store does: stream.Head's contract).
	head, err := stream.Head(ctx, w.pool)
	if err != nil {
		return nil, err
	}
	resp := &policyv1.GetMembershipSnapshotResponse{StreamPosition: head}
	err = pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT workspace_id, username, email, role, disabled FROM member`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var m policyv1.Member
			var role string
			if err := rows.Scan(&m.Workspace, &m.Username, &m.Email, &role, &m.Disabled); err != nil {
				return err
			}
			r, ok := roles[role]
			if !ok {
				return errors.New("bad role")
			}
			m.Role = r
			resp.Members = append(resp.Members, &m)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT workspace_id, coalesce((operator_settings->'builder') = 'true'::jsonb, false) FROM workspace_settings`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var b policyv1.WorkspaceBuilder
			if err := rows.Scan(&b.Workspace, &b.Builder); err != nil {
				return err
			}
			resp.Workspaces = append(resp.Workspaces, &b)
		}
		return rows.Err()
	})
	return resp, err
}
