package client

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/revcache"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/stream"
)

// MaxBuilderTTL is the longest a builder flag is served from the cache without a re-read
// (spec: operator-builder-rights caches the flag for up to 60 s).
const MaxBuilderTTL = 60 * time.Second

// Options configure New. Each service is reached through its Conn when set, else by dialling
// its Addr; at least one of roleset and policy must be configured.
type Options struct {
	// RolesetAddr is roleset's gRPC address (host:port), used when RolesetConn is nil.
	RolesetAddr string
	// PolicyAddr is policy's gRPC address (host:port), used when PolicyConn is nil.
	PolicyAddr string
	// Token is the worker's own (service or job-independent) token, sent as the bearer on
	// policy calls (settings, watch). Never sent to roleset: ResolveConnection authenticates
	// with the job token.
	Token string

	// RolesetConn and PolicyConn are existing connections to use instead of dialling. The
	// caller keeps ownership (Close does not close them). They must not have connection-level
	// per-RPC credentials: the client attaches the right token to each call.
	RolesetConn, PolicyConn grpc.ClientConnInterface

	// Retry bounds the retries of transient failures. Zero fields take the defaults.
	Retry RetryPolicy

	// BuilderTTL is how long a cached builder flag is served without a re-read, even if no
	// event arrives. Default and maximum MaxBuilderTTL.
	BuilderTTL time.Duration
	// WatchMinBackoff and WatchMaxBackoff bound the delay between watch reconnects.
	// Defaults are stream.Follow's (100 ms, 10 s).
	WatchMinBackoff, WatchMaxBackoff time.Duration

	// Logger receives watch reconnects. Default slog.Default().
	Logger *slog.Logger
}

// Client resolves data-table connections and answers the builder flag. It is safe for
// concurrent use; Close it to stop the watch and close the connections it dialled.
type Client struct {
	roleset  rolesetv1.ConnectionServiceClient // nil without roleset
	settings policyv1.SettingsServiceClient    // nil without policy
	events   policyv1.EventServiceClient
	token    string
	retry    RetryPolicy
	logger   *slog.Logger
	// builder caches the flag per workspace while watcher, the follower of policy's settings
	// events, is live.
	builder    *revcache.Cache[string, bool]
	builderTTL time.Duration
	watcher    *stream.LiveFollower

	owned     []*grpc.ClientConn
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// New returns a client. Dialling is lazy (grpc.NewClient): New does not wait for the services,
// so workers and services may start in any order. ctx is only used while dialling and is not
// retained: the watch runs until Close.
func New(ctx context.Context, o Options) (*Client, error) {
	c := &Client{
		token:  o.Token,
		retry:  o.Retry.withDefaults(),
		logger: o.Logger,
		done:   make(chan struct{}),
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	ttl := o.BuilderTTL
	if ttl <= 0 || ttl > MaxBuilderTTL {
		ttl = MaxBuilderTTL
	}
	c.newBuilderCache(ttl, o.WatchMinBackoff, o.WatchMaxBackoff)

	rs, err := c.conn(ctx, o.RolesetConn, o.RolesetAddr)
	if err != nil {
		return nil, errors.Join(err, c.closeOwned())
	}
	pol, err := c.conn(ctx, o.PolicyConn, o.PolicyAddr)
	if err != nil {
		return nil, errors.Join(err, c.closeOwned())
	}
	if rs == nil && pol == nil {
		return nil, errors.New("client: configure roleset (RolesetAddr or RolesetConn) and/or policy (PolicyAddr or PolicyConn)")
	}
	if rs != nil {
		c.roleset = rolesetv1.NewConnectionServiceClient(rs)
	}
	wctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	if pol == nil {
		close(c.done)
		return c, nil
	}
	c.settings = policyv1.NewSettingsServiceClient(pol)
	c.events = policyv1.NewEventServiceClient(pol)
	go func() {
		defer close(c.done)
		_ = c.watcher.Run(wctx)
	}()
	return c, nil
}

// conn returns the given connection, or dials addr (plaintext, tracing, request-id
// forwarding, keepalive: server.Dial) with no connection-level token, or nil if neither.
func (c *Client) conn(ctx context.Context, given grpc.ClientConnInterface, addr string) (grpc.ClientConnInterface, error) {
	if given != nil {
		return given, nil
	}
	if addr == "" {
		return nil, nil
	}
	cc, err := server.Dial(ctx, addr, "")
	if err != nil {
		return nil, err
	}
	c.owned = append(c.owned, cc)
	return cc, nil
}

// Close stops the watch and closes the connections New dialled. It is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		<-c.done
		c.closeErr = c.closeOwned()
	})
	return c.closeErr
}

func (c *Client) closeOwned() error {
	var errsOut []error
	for _, cc := range c.owned {
		errsOut = append(errsOut, cc.Close())
	}
	c.owned = nil
	return errors.Join(errsOut...)
}
