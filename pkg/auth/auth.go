package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// Kind is what sort of caller a token belongs to. The zero value is no kind at all, so an
// Identity someone forgot to fill in never passes for a real caller.
type Kind int

const (
	// Superadmin is the bootstrap admin token from config: every workspace, every scope.
	Superadmin Kind = iota + 1
	// Service is another millwright service (or the platform) using the service token.
	Service
	// User is a workspace user's API token.
	User
	// Job is a token bound to one run (JobID).
	Job
)

// String returns the lower-case name used in logs and metrics.
func (k Kind) String() string {
	switch k {
	case Superadmin:
		return "superadmin"
	case Service:
		return "service"
	case User:
		return "user"
	case Job:
		return "job"
	}
	return "none"
}

// ScopeAll in Scopes grants every scope (the static tokens carry it).
const ScopeAll = "*"

// Identity is who is calling, as established by an Authenticator. Never built from request
// fields: only from a verified token.
type Identity struct {
	Kind      Kind
	Workspace string // the workspace the token is bound to; "" for Superadmin and Service
	Username  string
	Email     string
	Scopes    []string
	JobID     string // for Job tokens: the run the token is bound to
	TokenID   string // a non-secret id of the token (for logs, revocation), never the token
	// ExpiresAt is when the token stops working (zero for the configured Superadmin and Service
	// tokens): a token never mints one that outlives it.
	ExpiresAt time.Time
}

// HasScope reports whether the token carries scope s (or ScopeAll). An Authenticator that
// treats "no scopes" as "unrestricted" must say so by returning ScopeAll, so the rule lives in
// one place.
func (i Identity) HasScope(s string) bool {
	return slices.Contains(i.Scopes, s) || slices.Contains(i.Scopes, ScopeAll)
}

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity the auth interceptor stored; false on public methods.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Unauthenticated returns the refusal for a missing or bad token (reason UNAUTHENTICATED).
func Unauthenticated(msg string) error {
	return errs.New(codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, msg, nil)
}

// BearerToken returns the token of the incoming "authorization: Bearer <t>" metadata, or an
// Unauthenticated error when it is missing, repeated or not a bearer token.
func BearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	switch {
	case len(vals) == 0:
		return "", Unauthenticated("missing bearer token")
	case len(vals) > 1:
		return "", Unauthenticated("more than one authorization header")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", Unauthenticated("authorization is not a bearer token")
	}
	return token, nil
}

// Authenticator turns a bearer token into an Identity.
type Authenticator interface {
	// Authenticate returns the token's identity. It returns ErrUnknownToken (or an error
	// wrapping it) when the token is not of a kind it issues, an Unauthenticated status when
	// it is but is refused (expired, revoked), and any other error for a failure to decide
	// (the database is down), which the server rewrites (Unavailable, ...), never as "denied".
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// ErrUnknownToken is what an Authenticator returns for a token it does not recognize. It is
// also an Unauthenticated status, so returned as is it is the right answer to a client.
var ErrUnknownToken error = unknownToken{}

type unknownToken struct{}

func (unknownToken) Error() string { return "unknown token" }

func (unknownToken) GRPCStatus() *status.Status {
	st, _ := status.FromError(Unauthenticated("unknown token"))
	return st
}

// Static recognizes the tokens that come from config. Comparison is constant time over
// SHA-256 digests, so neither content nor length of a configured token leaks through timing.
// An empty configured token matches nothing.
type Static struct {
	AdminToken   string
	ServiceToken string
}

// Authenticate implements Authenticator.
func (s Static) Authenticate(_ context.Context, token string) (Identity, error) {
	switch {
	case equal(token, s.AdminToken):
		return Identity{Kind: Superadmin, Username: "superadmin", Scopes: []string{ScopeAll}, TokenID: "static:admin"}, nil
	case equal(token, s.ServiceToken):
		return Identity{Kind: Service, Username: "service", Scopes: []string{ScopeAll}, TokenID: "static:service"}, nil
	}
	return Identity{}, ErrUnknownToken
}

func equal(got, want string) bool {
	if want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// Chain tries each Authenticator in order: the first that does not answer ErrUnknownToken
// decides. A token no one recognizes is Unauthenticated.
type Chain []Authenticator

// Authenticate implements Authenticator.
func (c Chain) Authenticate(ctx context.Context, token string) (Identity, error) {
	for _, a := range c {
		id, err := a.Authenticate(ctx, token)
		if errors.Is(err, ErrUnknownToken) {
			continue
		}
		return id, err
	}
	return Identity{}, ErrUnknownToken
}

// PerRPC returns client credentials that send "authorization: Bearer <token>" on every call.
// They allow insecure transports: services talk over loopback or a mesh that provides TLS.
func PerRPC(token string) credentials.PerRPCCredentials { return bearer(token) }

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
