package auth_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

func requireUnauthenticated(t *testing.T, err error) {
	t.Helper()
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	reason, ok := errs.Reason(err)
	require.True(t, ok)
	require.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, reason)
}

func TestBearerToken(t *testing.T) {
	cases := []struct {
		name  string
		md    metadata.MD
		token string
	}{
		{"ok", metadata.Pairs("authorization", "Bearer abc"), "abc"},
		{"lower-case scheme", metadata.Pairs("authorization", "bearer abc"), "abc"},
		{"missing", metadata.MD{}, ""},
		{"basic", metadata.Pairs("authorization", "Basic abc"), ""},
		{"empty token", metadata.Pairs("authorization", "Bearer "), ""},
		{"two headers", metadata.Pairs("authorization", "Bearer a", "authorization", "Bearer b"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.NewIncomingContext(context.Background(), tc.md)
			got, err := auth.BearerToken(ctx)
			if tc.token == "" {
				requireUnauthenticated(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.token, got)
		})
	}
}

func TestStatic(t *testing.T) {
	s := auth.Static{AdminToken: "admin-secret", ServiceToken: "svc-secret"}
	ctx := context.Background()

	id, err := s.Authenticate(ctx, "admin-secret")
	require.NoError(t, err)
	assert.Equal(t, auth.Superadmin, id.Kind)
	assert.True(t, id.HasScope("apps:write"))

	id, err = s.Authenticate(ctx, "svc-secret")
	require.NoError(t, err)
	assert.Equal(t, auth.Service, id.Kind)

	for _, tok := range []string{"", "admin-secre", "admin-secret2", "x"} {
		_, err := s.Authenticate(ctx, tok)
		require.ErrorIs(t, err, auth.ErrUnknownToken)
		requireUnauthenticated(t, err)
	}
	// Unset tokens match nothing, in particular not the empty token.
	_, err = auth.Static{}.Authenticate(ctx, "")
	require.ErrorIs(t, err, auth.ErrUnknownToken)
}

type fixed struct {
	token string
	id    auth.Identity
	err   error
}

func (f fixed) Authenticate(_ context.Context, token string) (auth.Identity, error) {
	if token != f.token {
		return auth.Identity{}, auth.ErrUnknownToken
	}
	return f.id, f.err
}

func TestChain(t *testing.T) {
	revoked := auth.Unauthenticated("token revoked")
	c := auth.Chain{
		auth.Static{AdminToken: "admin"},
		fixed{token: "user", id: auth.Identity{Kind: auth.User, Workspace: "w", Scopes: []string{"jobs:run"}}},
		fixed{token: "revoked", err: revoked},
		fixed{token: "revoked", id: auth.Identity{Kind: auth.User}}, // never reached
	}
	ctx := context.Background()

	id, err := c.Authenticate(ctx, "user")
	require.NoError(t, err)
	assert.Equal(t, auth.User, id.Kind)
	assert.True(t, id.HasScope("jobs:run"))
	assert.False(t, id.HasScope("apps:write"))

	_, err = c.Authenticate(ctx, "revoked")
	require.ErrorIs(t, err, revoked, "a refusal stops the chain")

	_, err = c.Authenticate(ctx, "nobody")
	require.ErrorIs(t, err, auth.ErrUnknownToken)
	requireUnauthenticated(t, err)
}

func TestIdentityContext(t *testing.T) {
	_, ok := auth.FromContext(context.Background())
	require.False(t, ok)
	ctx := auth.WithIdentity(context.Background(), auth.Identity{Kind: auth.Job, JobID: "j"})
	id, ok := auth.FromContext(ctx)
	require.True(t, ok)
	assert.Equal(t, "j", id.JobID)
	assert.Equal(t, "job", id.Kind.String())
	assert.Equal(t, "none", auth.Kind(0).String())
}

func TestPerRPC(t *testing.T) {
	c := auth.PerRPC("tok")
	assert.False(t, c.RequireTransportSecurity())
	md, err := c.GetRequestMetadata(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"authorization": "Bearer tok"}, md)
}
