package policyid

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/roleset/internal/core"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Client implements core.Identity over a connection to policy (dialed with the service token).
type Client struct {
	runs       policyv1.RunServiceClient
	workspaces policyv1.WorkspaceServiceClient
	events     policyv1.EventServiceClient
}

// New wraps a connection.
func New(cc grpc.ClientConnInterface) *Client {
	return &Client{runs: policyv1.NewRunServiceClient(cc), workspaces: policyv1.NewWorkspaceServiceClient(cc), events: policyv1.NewEventServiceClient(cc)}
}

// RunIdentity implements core.Identity.
func (c *Client) RunIdentity(ctx context.Context, token string) (core.Run, error) {
	resp, err := c.runs.GetRunIdentity(ctx, &policyv1.GetRunIdentityRequest{JobToken: token})
	if err != nil {
		if status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.NotFound {
			return core.Run{}, core.ErrUnauthenticated
		}
		return core.Run{}, err
	}
	r := resp.GetRun()
	return core.Run{Workspace: r.GetWorkspace(), JobID: r.GetJobId(), PermissionedAs: r.GetPermissionedAs(),
		Origin: r.GetOrigin().String(), HasViewer: r.GetHasViewer(), ViewerEmail: r.GetViewerEmail()}, nil
}

// Tenancy implements core.Identity.
func (c *Client) Tenancy(ctx context.Context, ws, email string) (tenancy.Identity, error) {
	return c.resolve(ctx, &policyv1.ResolveTenancyRequest{Workspace: ws, Email: email})
}

func (c *Client) resolve(ctx context.Context, req *policyv1.ResolveTenancyRequest) (tenancy.Identity, error) {
	resp, err := c.workspaces.ResolveTenancy(ctx, req)
	if err != nil {
		switch status.Code(err) {
		case codes.NotFound, codes.PermissionDenied:
			return tenancy.Identity{}, core.ErrNotMember
		}
		return tenancy.Identity{}, err
	}
	return FromProto(resp), nil
}

// OwnerTenancy implements core.Identity: a run's permissioned_as is "u/<username>", resolved
// by username; a group owner names no user and reaches no role.
func (c *Client) OwnerTenancy(ctx context.Context, r core.Run) (tenancy.Identity, error) {
	if !strings.HasPrefix(r.PermissionedAs, "u/") {
		return tenancy.Identity{}, core.ErrNotMember // a group owner names no user
	}
	id, err := c.resolve(ctx, &policyv1.ResolveTenancyRequest{Workspace: r.Workspace,
		Username: strings.TrimPrefix(r.PermissionedAs, "u/")})
	if err != nil {
		return id, err
	}
	if id.Username != strings.TrimPrefix(r.PermissionedAs, "u/") {
		return tenancy.Identity{}, core.ErrNotMember
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

// Follower follows policy's Watch and applies it to a cache.
type Follower struct {
	c         *Client
	cache     *core.Cache
	connected atomic.Bool
	lastMsg   atomic.Int64 // unix nanos of the last message or open
	pos       atomic.Int64
	// Silence is how long a connected stream may stay silent (heartbeats included) before it is
	// no longer trusted. Default 45s (policy heartbeats every 15s).
	Silence time.Duration
}

// NewFollower returns a follower for cache.
func NewFollower(c *Client, cache *core.Cache) *Follower {
	f := &Follower{c: c, cache: cache, Silence: 45 * time.Second}
	f.pos.Store(-1)
	return f
}

// Live reports whether the stream is connected and recently heard from.
func (f *Follower) Live() bool {
	return f.connected.Load() && time.Since(time.Unix(0, f.lastMsg.Load())) < f.Silence
}

type receiver struct {
	s policyv1.EventService_WatchClient
	f *Follower
}

func (r receiver) Recv() (*commonv1.Event, int64, error) {
	m, err := r.s.Recv()
	if err != nil {
		r.f.down()
		return nil, 0, err
	}
	r.f.lastMsg.Store(time.Now().UnixNano())
	if !r.f.connected.Load() {
		// First message of this stream: the server is now delivering every event after its
		// position. Anything computed before is dropped (the generation moves), so no answer
		// read before an event we will never see gets cached.
		r.f.cache.DropAll()
		r.f.connected.Store(true)
	}
	return m.GetEvent(), m.GetHeadId(), nil
}

func (f *Follower) down() {
	f.connected.Store(false)
	f.cache.DropAll()
}

// Run follows until ctx is done. It starts at the head (a fresh cache needs no history) and
// resumes after the last applied id on reconnect, dropping everything in between.
func (f *Follower) Run(ctx context.Context) error {
	return stream.Follow(ctx, stream.FollowOptions{
		Open: func(ctx context.Context, after int64) (stream.Receiver, error) {
			s, err := f.c.events.Watch(ctx, &policyv1.WatchRequest{AfterId: after})
			if err != nil {
				f.down()
				return nil, err
			}
			// Live only from the first message (see receiver.Recv): the server may not yet
			// have read its position when Watch returns.
			return receiver{s: s, f: f}, nil
		},
		After: func(context.Context) (int64, error) { return f.pos.Load(), nil },
		Apply: func(_ context.Context, e stream.Event) error {
			f.cache.OnPolicyEvent(e.Kind, e.Workspace)
			f.pos.Store(e.ID)
			return nil
		},
		Resync: func(context.Context) (int64, error) {
			f.cache.DropAll()
			return -1, nil
		},
		OnHead: func(head int64) {
			if f.pos.Load() < 0 {
				f.pos.Store(head)
			}
		},
	})
}
