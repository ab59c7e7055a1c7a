package projection

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/billing/internal/seats"
)

// GRPCSource reads policy over its gRPC API: EventService.Watch for the stream and
// WorkspaceService.GetMembershipSnapshot for resyncs.
type GRPCSource struct {
	Events    policyv1.EventServiceClient
	Workspace policyv1.WorkspaceServiceClient
}

// NewGRPCSource returns a source over one connection to policy.
func NewGRPCSource(cc grpc.ClientConnInterface) *GRPCSource {
	return &GRPCSource{Events: policyv1.NewEventServiceClient(cc), Workspace: policyv1.NewWorkspaceServiceClient(cc)}
}

// Watch opens policy's stream after the given position. Every kind is followed, even those
// billing ignores, so that the stored position reaches policy's head and an at-least-as-fresh
// check never waits for an event billing had no reason to ask for.
func (s *GRPCSource) Watch(ctx context.Context, after int64) (stream.Receiver, error) {
	st, err := s.Events.Watch(ctx, &policyv1.WatchRequest{AfterId: after})
	if err != nil {
		return nil, err
	}
	return grpcStream{st}, nil
}

type grpcStream struct {
	st grpc.ServerStreamingClient[policyv1.WatchResponse]
}

func (g grpcStream) Recv() (*commonv1.Event, int64, error) {
	resp, err := g.st.Recv()
	if err != nil {
		return nil, 0, err
	}
	return resp.GetEvent(), resp.GetHeadId(), nil
}

// Snapshot reads policy's membership snapshot.
func (s *GRPCSource) Snapshot(ctx context.Context) (seats.Snapshot, error) {
	resp, err := s.Workspace.GetMembershipSnapshot(ctx, &policyv1.GetMembershipSnapshotRequest{})
	if err != nil {
		return seats.Snapshot{}, err
	}
	return SnapshotFromProto(resp)
}

// SnapshotFromProto converts policy's snapshot message.
func SnapshotFromProto(resp *policyv1.GetMembershipSnapshotResponse) (seats.Snapshot, error) {
	snap := seats.Snapshot{Position: resp.GetStreamPosition()}
	for _, m := range resp.GetMembers() {
		role, err := roleFromProto(m.GetRole())
		if err != nil {
			return seats.Snapshot{}, fmt.Errorf("snapshot member %s/%s: %w", m.GetWorkspace(), m.GetUsername(), err)
		}
		snap.Members = append(snap.Members, seats.MemberChange{
			Workspace: m.GetWorkspace(), Username: m.GetUsername(),
			Email: m.GetEmail(), Role: role, Disabled: m.GetDisabled(),
		})
	}
	for _, w := range resp.GetWorkspaces() {
		snap.Builders = append(snap.Builders, seats.BuilderChange{Workspace: w.GetWorkspace(), Builder: w.GetBuilder()})
	}
	return snap, nil
}

func roleFromProto(r policyv1.Role) (seats.Role, error) {
	switch r {
	case policyv1.Role_ROLE_ADMIN:
		return seats.RoleAdmin, nil
	case policyv1.Role_ROLE_DEVELOPER:
		return seats.RoleDeveloper, nil
	case policyv1.Role_ROLE_OPERATOR:
		return seats.RoleOperator, nil
	default:
		return "", fmt.Errorf("unknown role %v", r)
	}
}
