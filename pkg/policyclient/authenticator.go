package policyclient

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/revcache"
	"github.com/millwright/millwright/pkg/stream"
)

// DefaultTTL bounds a cached identity when no event arrives (policy unreachable).
const DefaultTTL = 30 * time.Second

// Options configure an Authenticator.
type Options struct {
	// TTL of a cached identity; default DefaultTTL.
	TTL time.Duration
	// MaxEntries bounds the cache (emptied when full); default 100,000.
	MaxEntries int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Authenticator authenticates policy-issued tokens ("mwu_", "mwj_") remotely. conn must carry
// the service token (server.Dial(ctx, addr, serviceToken)). Run must be running for answers to
// be cached; without it every call asks policy.
type Authenticator struct {
	tokens policyv1.TokenServiceClient
	cache  *revcache.Cache[[32]byte, auth.Identity]
	follow *stream.LiveFollower
}

// New returns an Authenticator over conn.
func New(conn grpc.ClientConnInterface, o Options) *Authenticator {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 100_000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	a := &Authenticator{tokens: policyv1.NewTokenServiceClient(conn)}
	events := policyv1.NewEventServiceClient(conn)
	a.follow = stream.NewLiveFollower(stream.LiveOptions{
		Open: func(ctx context.Context, after int64) (stream.Receiver, error) {
			s, err := events.Watch(ctx, &policyv1.WatchRequest{AfterId: after, Kinds: []string{"token", "member", "run"}})
			if err != nil {
				return nil, err
			}
			return stream.Receive(s), nil
		},
		Apply:  func(e stream.Event) { Invalidate(a.cache, e) },
		Drop:   func() { a.cache.Purge() },
		Logger: o.Logger.With("component", "policyclient"),
	})
	a.cache = revcache.New[[32]byte, auth.Identity](revcache.Options{TTL: o.TTL, MaxEntries: o.MaxEntries, Live: a.follow.Live})
	return a
}

// LooksLikePolicyToken reports whether token has a policy prefix (others are not policy's:
// ErrUnknownToken lets auth.Chain try the static tokens).
func LooksLikePolicyToken(token string) bool {
	return strings.HasPrefix(token, "mwu_") || strings.HasPrefix(token, "mwj_")
}

// tokenLen is the length of every token policy issues: the prefix and 43 base64url characters
// (256 random bits; docs/policy.md, "Tokens"). Policy refuses any other length itself.
const tokenLen = 4 + 43

// Authenticate implements auth.Authenticator.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (auth.Identity, error) {
	if !LooksLikePolicyToken(token) {
		return auth.Identity{}, auth.ErrUnknownToken
	}
	if len(token) != tokenLen {
		// Policy's answer would be the same refusal (or InvalidArgument for an over-long one,
		// which a caller of another service must not see as a problem with its request): a
		// malformed bearer costs no round trip.
		return auth.Identity{}, auth.Unauthenticated("token is unknown, expired or revoked")
	}
	key := sha256.Sum256([]byte(token))
	return a.cache.Get(ctx, key, func(ctx context.Context) (auth.Identity, time.Time, error) {
		resp, err := a.tokens.Authenticate(ctx, &policyv1.AuthenticateRequest{Token: token})
		if err != nil {
			if status.Code(err) == codes.Unauthenticated {
				return auth.Identity{}, time.Time{}, auth.Unauthenticated("token is unknown, expired or revoked")
			}
			return auth.Identity{}, time.Time{}, err // a failure to decide, never "denied"
		}
		id := identity(resp)
		if id.Kind == 0 {
			return auth.Identity{}, time.Time{}, auth.Unauthenticated("token has no identity")
		}
		return id, id.ExpiresAt, nil
	})
}

func identity(r *policyv1.AuthenticateResponse) auth.Identity {
	id := auth.Identity{Workspace: r.GetWorkspace(), Username: r.GetUsername(), Email: r.GetEmail(),
		Scopes: r.GetScopes(), JobID: r.GetJobId(), TokenID: r.GetTokenId()}
	if r.GetExpiresAt().IsValid() {
		id.ExpiresAt = r.GetExpiresAt().AsTime()
	}
	switch r.GetKind() {
	case policyv1.TokenKind_TOKEN_KIND_USER:
		id.Kind = auth.User
	case policyv1.TokenKind_TOKEN_KIND_JOB:
		id.Kind = auth.Job
	default:
		// A kind this build does not know keeps the zero Kind, which no rule allows.
	}
	return id
}

// Run follows policy's stream (token, member and run events, from the head) until ctx ends,
// invalidating cached identities; answers are cached only while it delivers.
func (a *Authenticator) Run(ctx context.Context) error { return a.follow.Run(ctx) }

// Invalidate applies one of policy's stream events to a cache of identities keyed by token
// digest: a token event drops that token, a member event that member's user tokens, a run event
// that run's job token, a resync everything. The one rule for policy's own authenticator and
// this one.
func Invalidate(c *revcache.Cache[[32]byte, auth.Identity], e stream.Event) {
	switch {
	case e.Op == stream.OpResync:
		c.Purge()
	case e.Kind == "token":
		c.InvalidateFunc(func(_ [32]byte, id auth.Identity) bool { return id.TokenID == e.Key })
	case e.Kind == "member":
		c.InvalidateFunc(func(_ [32]byte, id auth.Identity) bool {
			return id.Kind == auth.User && id.Workspace == e.Workspace && id.Username == e.Key
		})
	case e.Kind == "run":
		c.InvalidateFunc(func(_ [32]byte, id auth.Identity) bool { return id.Kind == auth.Job && id.JobID == e.Key })
	}
}

// Stats returns the cache's running lookup counts (server.CacheCollectors).
func (a *Authenticator) Stats() (hits, misses uint64) { return a.cache.Stats() }

// Len returns the number of cached identities (tests, metrics).
func (a *Authenticator) Len() int { return a.cache.Len() }
