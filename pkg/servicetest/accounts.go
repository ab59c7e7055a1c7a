package servicetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/server"
)

// Accounts is what a service's authentication tests need from the real policy: workspace
// "acme" with its admin "boss" and a developer "dev", a user token for each, and the job token
// of a run of dev's (a schedule, so it has no viewer). Tokens expire in an hour.
type Accounts struct {
	// Dev and Boss are the user tokens (Token and TokenID).
	Dev, Boss *policyv1.CreateTokenResponse
	// Job is the run's job token; JobID its run.
	Job, JobID string

	tokens policyv1.TokenServiceClient
	runs   policyv1.RunServiceClient
}

// Accounts creates the accounts in p, calling as the superadmin (o.AdminToken) and, to record
// the run, as the platform (o.ServiceToken).
func (p *Policy) Accounts(t testing.TB, o PolicyOptions) *Accounts {
	t.Helper()
	admin, platform := p.dial(t, o.AdminToken), p.dial(t, o.ServiceToken)
	ws := policyv1.NewWorkspaceServiceClient(admin)
	ctx := context.Background()
	_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "acme", Name: "Acme",
		AdminEmail: "boss@acme.test", AdminUsername: "boss"})
	require.NoError(t, err)
	_, err = ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: "acme", Username: "dev",
		Email: "dev@acme.test", Role: policyv1.Role_ROLE_DEVELOPER})
	require.NoError(t, err)
	a := &Accounts{tokens: policyv1.NewTokenServiceClient(admin), runs: policyv1.NewRunServiceClient(platform)}
	a.Dev, a.Boss = a.NewToken(t, "dev"), a.NewToken(t, "boss")
	rec, err := a.runs.RecordRun(ctx, &policyv1.RecordRunRequest{Workspace: "acme", JobId: NewUUID(),
		PermissionedAs: "u/dev", Origin: policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE})
	require.NoError(t, err)
	a.Job, a.JobID = rec.GetJobToken(), rec.GetRun().GetJobId()
	return a
}

// dial connects to policy with every call carrying token.
func (p *Policy) dial(t testing.TB, token string) *grpc.ClientConn {
	t.Helper()
	cc, err := server.Dial(context.Background(), p.Addr, token)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NewToken creates another user token of an acme member.
func (a *Accounts) NewToken(t testing.TB, user string) *policyv1.CreateTokenResponse {
	t.Helper()
	resp, err := a.tokens.CreateToken(context.Background(), &policyv1.CreateTokenRequest{Workspace: "acme", Username: user,
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))})
	require.NoError(t, err)
	return resp
}

// Kind is who a token authenticates as in another service: the Kind* constants.
type Kind string

// The kinds of TokenCase.
const (
	KindSuperadmin Kind = "superadmin" // the admin config token
	KindService    Kind = "service"    // the service config token
	KindUser       Kind = "user"       // a policy user token (a workspace admin's too)
	KindJob        Kind = "job"        // a policy job token
	KindNone       Kind = ""           // no token, or one nobody issued: Unauthenticated
)

// TokenCase is a bearer token a service's RPCs must be tried with, and who it is.
type TokenCase struct {
	Name  string
	Token string
	Kind  Kind
}

// TokenCases is the table every service's "who gets what" test walks: the config tokens,
// missing, garbage, malformed and unknown tokens, and the accounts' user and job tokens.
func (a *Accounts) TokenCases(adminToken, serviceToken string) []TokenCase {
	return []TokenCase{
		{"superadmin token", adminToken, KindSuperadmin},
		{"service token", serviceToken, KindService},
		{"no token", "", KindNone},
		{"garbage", "garbage", KindNone},
		{"malformed user token", "mwu_short", KindNone},
		{"unknown user token", "mwu_" + strings.Repeat("A", 43), KindNone},
		{"unknown job token", "mwj_" + strings.Repeat("A", 43), KindNone},
		{"a developer's user token", a.Dev.GetToken(), KindUser},
		{"a workspace admin's user token", a.Boss.GetToken(), KindUser},
		{"a job token", a.Job, KindJob},
	}
}

// RevocationReaches runs the two subtests every service that authenticates policy's tokens
// must pass: once the service has cached a token's identity (its cache's entries gauge is
// entriesSample on the /metrics page at metricsAddr), revoking the user token, and finishing
// the job token's run, make the service refuse it as Unauthenticated within a bounded wait far
// below the cache's TTL, because policy's stream drops the cached identity. call makes one
// call the service refuses to a policy token with PermissionDenied; afterwards the boss's
// token is still PermissionDenied and the admin token still works.
func (a *Accounts) RevocationReaches(t *testing.T, metricsAddr, entriesSample, adminToken string, call func(token string) error) {
	cachedThenRefused := func(t *testing.T, token string, revoke func()) {
		t.Helper()
		WaitTokenCached(t, metricsAddr, entriesSample, func() bool { return status.Code(call(token)) == codes.PermissionDenied })
		revoke()
		RefusedWithin(t, func() bool { return status.Code(call(token)) == codes.Unauthenticated })
	}
	t.Run("a revoked user token is Unauthenticated within a bounded wait", func(t *testing.T) {
		cachedThenRefused(t, a.Dev.GetToken(), func() {
			_, err := a.tokens.RevokeToken(context.Background(), &policyv1.RevokeTokenRequest{Workspace: "acme", TokenId: a.Dev.GetTokenId()})
			require.NoError(t, err)
		})
		require.Equal(t, codes.PermissionDenied, status.Code(call(a.Boss.GetToken())), "other tokens are unaffected")
		require.NoError(t, call(adminToken))
	})
	t.Run("a finished run's job token is Unauthenticated within a bounded wait", func(t *testing.T) {
		cachedThenRefused(t, a.Job, func() {
			_, err := a.runs.FinishRun(context.Background(), &policyv1.FinishRunRequest{Workspace: "acme", JobId: a.JobID})
			require.NoError(t, err)
		})
	})
}
