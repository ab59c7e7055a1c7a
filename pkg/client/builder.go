package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/auth"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
)

// settingsKind is the stream kind of operator_settings changes (policy's settings trigger).
const settingsKind = "settings"

// BuilderEnabled reports whether operator builder rights are on in workspace (the resolved
// operator_settings.builder, read with GetOperatorSettings). The answer is cached per
// workspace for at most the TTL and dropped as soon as policy's stream delivers a settings
// event for the workspace; while no watch stream is live the call reads through. Errors are
// never cached.
func (c *Client) BuilderEnabled(ctx context.Context, workspace string) (bool, error) {
	if c.settings == nil {
		return false, errors.New("client: policy is not configured (PolicyAddr or PolicyConn)")
	}
	if v, ok := c.builder.get(workspace); ok {
		return v, nil
	}
	gen := c.builder.begin()
	resp, err := call(ctx, c.retry, "get operator settings", func(ctx context.Context) (*policyv1.GetOperatorSettingsResponse, error) {
		return c.settings.GetOperatorSettings(ctx, &policyv1.GetOperatorSettingsRequest{Workspace: workspace}, c.policyCreds()...)
	})
	if err != nil {
		return false, err
	}
	v := resp.GetSettings().GetBuilder()
	c.builder.fill(workspace, v, gen)
	return v, nil
}

// policyCreds attaches the worker's token to a policy call.
func (c *Client) policyCreds() []grpc.CallOption {
	if c.token == "" {
		return nil
	}
	return []grpc.CallOption{grpc.PerRPCCredentials(auth.PerRPC(c.token))}
}

// watch follows policy's settings events until ctx ends. It always opens from the head: the
// cache holds nothing a new stream could replay into, because every break drops it.
func (c *Client) watch(ctx context.Context, minBackoff, maxBackoff time.Duration) {
	_ = stream.Follow(ctx, stream.FollowOptions{
		Open: func(ctx context.Context, _ int64) (stream.Receiver, error) {
			c.builder.setLive(false) // a stream is not live until it delivers a message
			w, err := c.events.Watch(ctx, &policyv1.WatchRequest{AfterId: -1, Kinds: []string{settingsKind}}, c.policyCreds()...)
			if err != nil {
				return nil, err
			}
			return &watchReceiver{w: w, cache: c.builder}, nil
		},
		After: func(context.Context) (int64, error) { return -1, nil },
		Apply: func(_ context.Context, e stream.Event) error {
			switch {
			case e.Kind != settingsKind:
			case e.Workspace == "":
				c.builder.dropAll() // an instance-wide change: whatever it is, nothing survives
			default:
				c.builder.drop(e.Workspace)
			}
			return nil
		},
		Resync: func(context.Context) (int64, error) {
			c.builder.resyncs.Add(1)
			c.builder.setLive(false)
			return -1, nil
		},
		MinBackoff: minBackoff,
		MaxBackoff: maxBackoff,
		Logger:     c.logger,
	})
}

// watchReceiver adapts the generated Watch stream to stream.Receiver and tells the cache when
// the stream becomes live (first message) and when it ends (any error).
type watchReceiver struct {
	w     policyv1.EventService_WatchClient
	cache *builderCache
	live  bool
}

func (r *watchReceiver) Recv() (*commonv1.Event, int64, error) {
	m, err := r.w.Recv()
	if err != nil {
		r.cache.setLive(false)
		return nil, 0, err
	}
	if !r.live {
		// The server fixed its starting head before sending anything, so every change
		// committed after this point is delivered on this stream. Reads from now on may be
		// cached; what was read before may predate a change we will never see: drop it.
		r.live = true
		r.cache.setLive(true)
	}
	return m.GetEvent(), m.GetHeadId(), nil
}

// builderCache is the per-workspace cache of the builder flag.
//
// Invariant: an entry exists only if the read that produced it started while the current
// stream was live and no invalidation happened between its start and its fill. gen counts
// invalidations (drop, dropAll, live changes); a fill whose gen is stale is discarded.
type builderCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	live    bool
	gen     uint64
	entries map[string]builderEntry

	resyncs atomic.Int64 // for tests and diagnostics
}

type builderEntry struct {
	enabled bool
	expires time.Time
}

func newBuilderCache(ttl time.Duration, now func() time.Time) *builderCache {
	return &builderCache{ttl: ttl, now: now, entries: map[string]builderEntry{}}
}

func (b *builderCache) get(ws string) (bool, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[ws]
	if !ok || !b.live {
		return false, false
	}
	if !b.now().Before(e.expires) {
		delete(b.entries, ws)
		return false, false
	}
	return e.enabled, true
}

// begin returns the generation a read starts in.
func (b *builderCache) begin() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

// fill stores a read's result unless the stream is not live or anything was invalidated since
// the read began.
func (b *builderCache) fill(ws string, enabled bool, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.live || gen != b.gen {
		return
	}
	b.entries[ws] = builderEntry{enabled: enabled, expires: b.now().Add(b.ttl)}
}

func (b *builderCache) drop(ws string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, ws)
	b.gen++
}

func (b *builderCache) dropAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.entries)
	b.gen++
}

// setLive records a stream becoming live or going away; both drop every entry.
func (b *builderCache) setLive(live bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live = live
	clear(b.entries)
	b.gen++
}

func (b *builderCache) isLive() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live
}

func (b *builderCache) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.entries)
}
