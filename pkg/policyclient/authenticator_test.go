package policyclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/policyclient"
)

// conn answers Authenticate with answer and counts the calls.
type conn struct {
	calls  int
	answer error
}

func (c *conn) Invoke(_ context.Context, method string, _, reply any, _ ...grpc.CallOption) error {
	c.calls++
	if method != policyv1.TokenService_Authenticate_FullMethodName {
		return status.Error(codes.Unimplemented, method)
	}
	return c.answer
}

func (c *conn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams here")
}

// TestTokenShape: tokens that are not policy's are left to the next authenticator, policy's
// prefix with the wrong length is refused without asking policy, and only a well-formed token
// is sent. The real round trip, caching and invalidation are tested against a real policy
// (services/policy/internal/api/policyclient_test.go and the roleset and billing tests).
func TestTokenShape(t *testing.T) {
	well := "mwu_" + strings.Repeat("A", 43)
	tests := []struct {
		name  string
		token string
		// answer is policy's, if asked
		answer    error
		wantCode  codes.Code
		wantCalls int
		unknown   bool // ErrUnknownToken: auth.Chain tries the next authenticator
	}{
		{"static-looking token", "test-admin-token", nil, codes.Unauthenticated, 0, true},
		{"empty", "", nil, codes.Unauthenticated, 0, true},
		{"user prefix, too short", "mwu_short", nil, codes.Unauthenticated, 0, false},
		{"job prefix, too long", "mwj_" + strings.Repeat("A", 600), nil, codes.Unauthenticated, 0, false},
		{"well-formed, policy refuses", well, status.Error(codes.Unauthenticated, "unknown"), codes.Unauthenticated, 1, false},
		{"well-formed, policy unreachable", well, status.Error(codes.Unavailable, "down"), codes.Unavailable, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &conn{answer: tt.answer}
			pc := policyclient.New(c, policyclient.Options{})
			_, err := pc.Authenticate(context.Background(), tt.token)
			require.Equal(t, tt.wantCode, status.Code(err), "%v", err)
			require.Equal(t, tt.unknown, errors.Is(err, auth.ErrUnknownToken))
			require.Equal(t, tt.wantCalls, c.calls)
			hits, misses := pc.Stats()
			require.Equal(t, [2]uint64{0, uint64(tt.wantCalls)}, [2]uint64{hits, misses}, "only lookups of well-formed tokens count")
			require.Zero(t, pc.Len(), "a refusal is never cached")
		})
	}
}
