package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/auth"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/revcache"
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
	return c.builder.Get(ctx, workspace, func(ctx context.Context) (bool, time.Time, error) {
		resp, err := call(ctx, c.retry, "get operator settings", func(ctx context.Context) (*policyv1.GetOperatorSettingsResponse, error) {
			return c.settings.GetOperatorSettings(ctx, &policyv1.GetOperatorSettingsRequest{Workspace: workspace}, c.policyCreds()...)
		})
		return resp.GetSettings().GetBuilder(), time.Time{}, err
	})
}

// policyCreds attaches the worker's token to a policy call.
func (c *Client) policyCreds() []grpc.CallOption {
	if c.token == "" {
		return nil
	}
	return []grpc.CallOption{grpc.PerRPCCredentials(auth.PerRPC(c.token))}
}

// newBuilderCache returns the per-workspace cache of the builder flag and the follower of
// policy's settings events that keeps it honest (run it until Close).
func (c *Client) newBuilderCache(ttl, minBackoff, maxBackoff time.Duration) {
	c.watcher = stream.NewLiveFollower(stream.LiveOptions{
		Open: func(ctx context.Context, after int64) (stream.Receiver, error) {
			w, err := c.events.Watch(ctx, &policyv1.WatchRequest{AfterId: after, Kinds: []string{settingsKind}}, c.policyCreds()...)
			if err != nil {
				return nil, err
			}
			return stream.Receive(w), nil
		},
		Apply: func(e stream.Event) {
			switch {
			case e.Kind != settingsKind:
			case e.Workspace == "":
				c.builder.Purge() // an instance-wide change: whatever it is, nothing survives
			default:
				c.builder.Invalidate(e.Workspace)
			}
		},
		Drop:       func() { c.builder.Purge() },
		MinBackoff: minBackoff,
		MaxBackoff: maxBackoff,
		Logger:     c.logger,
	})
	c.builderTTL = ttl
	c.builder = revcache.New[string, bool](revcache.Options{TTL: ttl, MaxEntries: maxBuilderEntries, Live: c.watcher.Live})
}

// maxBuilderEntries bounds the flag cache: one entry per workspace a worker serves.
const maxBuilderEntries = 10_000
