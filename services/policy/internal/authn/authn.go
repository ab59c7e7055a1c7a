package authn

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/policyclient"
	"github.com/millwright/millwright/pkg/revcache"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// DefaultTTL bounds how long a cached identity is trusted without an event.
const DefaultTTL = 60 * time.Second

// Store is what the authenticator reads.
type Store interface {
	Authenticate(ctx context.Context, digest []byte) (store.TokenIdentity, error)
}

// Local is the policy process's Authenticator for its own tokens.
type Local struct {
	store Store
	cache *revcache.Cache[[32]byte, auth.Identity]
}

// New returns a Local authenticator. live reports whether the stream listener is connected and
// caught up (nil: never); nothing is cached while it is not.
func New(st Store, ttl time.Duration, live func() bool) *Local {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Local{store: st, cache: revcache.New[[32]byte, auth.Identity](revcache.Options{TTL: ttl, MaxEntries: 100_000, Live: live})}
}

// Authenticate implements auth.Authenticator. Strings without a policy prefix are
// auth.ErrUnknownToken, so auth.Chain can try the static tokens.
func (l *Local) Authenticate(ctx context.Context, token string) (auth.Identity, error) {
	if !rulebook.LooksLikeToken(token) {
		return auth.Identity{}, auth.ErrUnknownToken
	}
	key := sha256.Sum256([]byte(token))
	return l.cache.Get(ctx, key, func(ctx context.Context) (auth.Identity, time.Time, error) {
		t, err := l.store.Authenticate(ctx, key[:])
		if errors.Is(err, rulebook.ErrBadCredential) {
			return auth.Identity{}, time.Time{}, auth.Unauthenticated("token is unknown, expired or revoked")
		}
		if err != nil {
			return auth.Identity{}, time.Time{}, err
		}
		return Identity(t), t.ExpiresAt, nil
	})
}

// Identity converts a stored token identity to auth.Identity. An unrestricted user token (no
// stored scopes) carries auth.ScopeAll, as auth.Identity.HasScope expects; a job token carries
// no scope at all: what it may do is decided per RPC by the authorization table.
func Identity(t store.TokenIdentity) auth.Identity {
	switch t.Kind {
	case store.TokenUser:
		scopes := t.Scopes
		if len(scopes) == 0 {
			scopes = []string{auth.ScopeAll}
		}
		return auth.Identity{Kind: auth.User, Workspace: t.Workspace, Username: t.Username, Email: t.Email,
			Scopes: scopes, TokenID: t.ID, ExpiresAt: t.ExpiresAt}
	case store.TokenJob:
		return auth.Identity{Kind: auth.Job, Workspace: t.Workspace, JobID: t.JobID, TokenID: t.ID, ExpiresAt: t.ExpiresAt}
	}
	return auth.Identity{} // Kind 0: the server refuses it
}

// OnEvent drops what an event may have changed (the same rule as pkg/policyclient's).
func (l *Local) OnEvent(e stream.Event) {
	policyclient.Invalidate(l.cache, e)
}
