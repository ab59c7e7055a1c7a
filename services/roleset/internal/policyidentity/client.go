package policyidentity

import (
	"context"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/roleset/internal/engine"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Client implements engine.Identity over a connection to policy (dialed with the service token).
type Client struct {
	runs       policyv1.RunServiceClient
	workspaces policyv1.WorkspaceServiceClient
	events     policyv1.EventServiceClient
}

// New wraps a connection.
func New(cc grpc.ClientConnInterface) *Client {
	return &Client{runs: policyv1.NewRunServiceClient(cc), workspaces: policyv1.NewWorkspaceServiceClient(cc), events: policyv1.NewEventServiceClient(cc)}
}

// RunIdentity implements engine.Identity.
func (c *Client) RunIdentity(ctx context.Context, token string) (engine.Run, error) {
	resp, err := c.runs.GetRunIdentity(ctx, &policyv1.GetRunIdentityRequest{JobToken: token})
	if err != nil {
		if status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.NotFound {
			return engine.Run{}, engine.ErrUnauthenticated
		}
		return engine.Run{}, err
	}
	r := resp.GetRun()
	return engine.Run{Workspace: r.GetWorkspace(), JobID: r.GetJobId(), PermissionedAs: r.GetPermissionedAs(),
		Origin: r.GetOrigin().String(), HasViewer: r.GetHasViewer(), ViewerEmail: r.GetViewerEmail()}, nil
}

// Tenancy implements engine.Identity.
func (c *Client) Tenancy(ctx context.Context, ws, email string) (tenancy.Identity, error) {
	return c.resolve(ctx, &policyv1.ResolveTenancyRequest{Workspace: ws, Email: email})
}

func (c *Client) resolve(ctx context.Context, req *policyv1.ResolveTenancyRequest) (tenancy.Identity, error) {
	resp, err := c.workspaces.ResolveTenancy(ctx, req)
	if err != nil {
		switch status.Code(err) {
		case codes.NotFound, codes.PermissionDenied:
			return tenancy.Identity{}, engine.ErrNotMember
		default:
			return tenancy.Identity{}, err
		}
	}
	return FromProto(resp), nil
}

// OwnerTenancy implements engine.Identity: a run's permissioned_as is "u/<username>", resolved
// by username; a group owner names no user and reaches no role.
func (c *Client) OwnerTenancy(ctx context.Context, r engine.Run) (tenancy.Identity, error) {
	if !strings.HasPrefix(r.PermissionedAs, "u/") {
		return tenancy.Identity{}, engine.ErrNotMember // a group owner names no user
	}
	id, err := c.resolve(ctx, &policyv1.ResolveTenancyRequest{Workspace: r.Workspace,
		Username: strings.TrimPrefix(r.PermissionedAs, "u/")})
	if err != nil {
		return id, err
	}
	if id.Username != strings.TrimPrefix(r.PermissionedAs, "u/") {
		return tenancy.Identity{}, engine.ErrNotMember
	}
	return id, nil
}

// FromProto converts policy's answer.
func FromProto(resp *policyv1.ResolveTenancyResponse) tenancy.Identity {
	id := tenancy.Identity{Username: resp.GetUsername(), Groups: resp.GetGroups(), IsAdmin: resp.GetIsAdmin()}
	for _, f := range resp.GetFolders() {
		id.Folders = append(id.Folders, tenancy.Folder{Name: f.GetName(), Write: f.GetWrite() || f.GetOwner()})
	}
	return id
}

// Follower returns the follower of policy's Watch (every kind, from the head) that drops eng's
// caches: its Live is half of the engine cache's liveness (with roleset's own stream). Run it.
func (c *Client) Follower(eng *engine.Engine, logger *slog.Logger) *stream.LiveFollower {
	return stream.NewLiveFollower(stream.LiveOptions{
		Open: func(ctx context.Context, after int64) (stream.Receiver, error) {
			s, err := c.events.Watch(ctx, &policyv1.WatchRequest{AfterId: after})
			if err != nil {
				return nil, err
			}
			return stream.Receive(s), nil
		},
		Apply:  func(e stream.Event) { eng.OnPolicyEvent(e.Kind, e.Workspace) },
		Drop:   eng.DropCaches,
		Logger: logger,
	})
}
