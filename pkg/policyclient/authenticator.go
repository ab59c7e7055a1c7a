package policyclient

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
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
	events policyv1.EventServiceClient
	opts   Options
	log    *slog.Logger
	now    func() time.Time

	hits, misses atomic.Uint64 // lookups of well-formed tokens (metrics)

	mu      sync.Mutex
	entries map[[32]byte]entry
	gen     uint64 // bumped by every invalidation
	// pos is the last event id applied (-1: watching from the head, nothing applied yet).
	pos int64
	// base: answers read at a stream position >= base are covered by the watcher; -1 while
	// unknown (not yet watching, or just resynced), when nothing is cached.
	base    int64
	running bool
	// live: the watch stream is connected and has delivered a message since it (re)opened.
	live     bool
	firstPos chan int64 // the first answer's position starts the watcher
}

type entry struct {
	id      auth.Identity
	expires time.Time
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
	return &Authenticator{
		tokens: policyv1.NewTokenServiceClient(conn), events: policyv1.NewEventServiceClient(conn),
		opts: o, log: o.Logger.With("component", "policyclient"), now: time.Now,
		entries: map[[32]byte]entry{}, pos: -1, base: -1, firstPos: make(chan int64, 1),
	}
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
	a.mu.Lock()
	if e, ok := a.entries[key]; ok && a.live && a.now().Before(e.expires) {
		a.mu.Unlock()
		a.hits.Add(1)
		return e.id, nil
	}
	gen := a.gen
	a.mu.Unlock()
	a.misses.Add(1)

	resp, err := a.tokens.Authenticate(ctx, &policyv1.AuthenticateRequest{Token: token})
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			return auth.Identity{}, auth.Unauthenticated("token is unknown, expired or revoked")
		}
		return auth.Identity{}, err // a failure to decide, never "denied"
	}
	id := identity(resp)
	if id.Kind == 0 {
		return auth.Identity{}, auth.Unauthenticated("token has no identity")
	}
	pos := resp.GetStreamPosition()
	select {
	case a.firstPos <- pos: // starts the watcher from the first answer's snapshot
	default:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running && a.live && a.gen == gen && a.base >= 0 && pos >= a.base {
		exp := a.now().Add(a.opts.TTL)
		if t := resp.GetExpiresAt().AsTime(); resp.GetExpiresAt() != nil && t.Before(exp) {
			exp = t
		}
		if len(a.entries) >= a.opts.MaxEntries {
			clear(a.entries)
		}
		a.entries[key] = entry{id: id, expires: exp}
	}
	return id, nil
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
	}
	return id
}

// Run follows policy's stream until ctx ends, invalidating cached identities. It starts
// watching from the stream position of the first answer it got.
func (a *Authenticator) Run(ctx context.Context) error {
	var start int64
	select {
	case start = <-a.firstPos:
	case <-ctx.Done():
		return ctx.Err()
	}
	a.mu.Lock()
	a.pos, a.base, a.running = start, start, true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.running = false
		clear(a.entries)
		a.mu.Unlock()
	}()
	return stream.Follow(ctx, stream.FollowOptions{
		Open: func(ctx context.Context, after int64) (stream.Receiver, error) {
			s, err := a.events.Watch(ctx, &policyv1.WatchRequest{AfterId: after, Kinds: []string{"token", "member", "run"}})
			if err != nil {
				return nil, err
			}
			return receiver{s: s, a: a}, nil
		},
		After: func(context.Context) (int64, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.pos < 0 {
				// Watching from the head again: whatever happened meanwhile is unknown.
				a.purgeLocked()
				a.base = -1
			}
			return a.pos, nil
		},
		Apply: func(_ context.Context, e stream.Event) error {
			a.apply(e)
			return nil
		},
		Resync: func(context.Context) (int64, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.purgeLocked()
			a.pos, a.base = -1, -1
			return -1, nil
		},
		OnHead: func(head int64) {
			a.mu.Lock()
			a.live = true // a message arrived: the stream delivers again
			if a.base < 0 {
				a.base = head // answers read at >= head are covered from here on
			}
			a.mu.Unlock()
		},
		Logger: a.opts.Logger,
	})
}

func (a *Authenticator) purgeLocked() {
	a.gen++
	clear(a.entries)
}

func (a *Authenticator) apply(e stream.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	a.pos = e.ID
	if a.base < 0 {
		a.base = e.ID
	}
	for k, v := range a.entries {
		drop := false
		switch e.Kind {
		case "token":
			drop = v.id.TokenID == e.Key
		case "member":
			drop = v.id.Kind == auth.User && v.id.Workspace == e.Workspace && v.id.Username == e.Key
		case "run":
			drop = v.id.Kind == auth.Job && v.id.JobID == e.Key
		}
		if drop {
			delete(a.entries, k)
		}
	}
}

// Stats returns the cache's running lookup counts (server.CacheCollectors).
func (a *Authenticator) Stats() (hits, misses uint64) { return a.hits.Load(), a.misses.Load() }

// Len returns the number of cached identities (tests, metrics).
func (a *Authenticator) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

type receiver struct {
	s grpc.ServerStreamingClient[policyv1.WatchResponse]
	a *Authenticator
}

func (r receiver) Recv() (*commonv1.Event, int64, error) {
	m, err := r.s.Recv()
	if err != nil {
		// The stream is down: a revoke may now pass unseen, so nothing cached is served (nor
		// kept) until it delivers again; every token is asked of policy meanwhile.
		r.a.mu.Lock()
		r.a.live = false
		r.a.purgeLocked()
		r.a.mu.Unlock()
		return nil, 0, err
	}
	return m.GetEvent(), m.GetHeadId(), nil
}
