package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/policyclient"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// TestPolicyclientAuthenticator runs pkg/policyclient against a real policy server: answers are
// cached, and a revoke, a finished run or a disabled member reaches the client's cache through
// the Watch stream.
func TestPolicyclientAuthenticator(t *testing.T) {
	dsn := testdb.DSN(t)
	r := startReplica(t, dsn)
	other := startReplica(t, dsn) // changes are made through another replica
	workspaceWith(t, r, "w")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)

	conn, err := grpc.NewClient(r.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.PerRPC(serviceToken)))
	require.NoError(t, err)
	defer conn.Close()
	pc := policyclient.New(conn, policyclient.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pc.Run(ctx) }()
	defer func() { cancel(); <-done }()

	_, err = pc.Authenticate(context.Background(), "some-static-token")
	require.ErrorIs(t, err, auth.ErrUnknownToken)
	_, err = pc.Authenticate(context.Background(), "mwu_nope")
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	tokResp, err := other.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "w", Username: "op", ExpiresAt: timestampIn(time.Hour)})
	require.NoError(t, err)
	tok := tokResp.GetToken()
	id, err := pc.Authenticate(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, auth.User, id.Kind)
	require.Equal(t, "op", id.Username)
	require.Equal(t, "w", id.Workspace)
	// Cached once the watch stream has delivered its first message.
	_, ok := waitUntil(2*time.Second, func() bool {
		_, err := pc.Authenticate(context.Background(), tok)
		return err == nil && pc.Len() == 1
	})
	require.True(t, ok, "identity never cached")

	_, err = other.tok.RevokeToken(admin, &policyv1.RevokeTokenRequest{Workspace: "w", TokenId: tokResp.GetTokenId()})
	require.NoError(t, err)
	took, ok := waitUntil(2*time.Second, func() bool {
		_, err := pc.Authenticate(context.Background(), tok)
		return status.Code(err) == codes.Unauthenticated
	})
	require.True(t, ok, "client still accepts a revoked token")
	t.Logf("client refused the revoked token after %v", took)
	require.Less(t, took, time.Second, "well inside the TTL")

	rec, err := other.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "w", JobId: nextJob(), PermissionedAs: "u/op",
		Origin: policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE})
	require.NoError(t, err)
	jid, err := pc.Authenticate(context.Background(), rec.GetJobToken())
	require.NoError(t, err)
	require.Equal(t, auth.Job, jid.Kind)
	require.Equal(t, rec.GetRun().GetJobId(), jid.JobID)
	_, err = other.run.FinishRun(service, &policyv1.FinishRunRequest{Workspace: "w", JobId: rec.GetRun().GetJobId()})
	require.NoError(t, err)
	_, ok = waitUntil(2*time.Second, func() bool {
		_, err := pc.Authenticate(context.Background(), rec.GetJobToken())
		return status.Code(err) == codes.Unauthenticated
	})
	require.True(t, ok, "client still accepts a finished run's token")

	tok2 := userToken(t, other, "w", "op")
	_, err = pc.Authenticate(context.Background(), tok2)
	require.NoError(t, err)
	_, err = other.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: "op", Email: "op@x",
		Role: policyv1.Role_ROLE_OPERATOR, Disabled: true})
	require.NoError(t, err)
	_, ok = waitUntil(2*time.Second, func() bool {
		_, err := pc.Authenticate(context.Background(), tok2)
		return status.Code(err) == codes.Unauthenticated
	})
	require.True(t, ok, "client still accepts a disabled member's token")

	// Through auth.Chain with the static tokens, as other services wire it.
	chain := auth.Chain{auth.Static{ServiceToken: serviceToken}, pc}
	sid, err := chain.Authenticate(context.Background(), serviceToken)
	require.NoError(t, err)
	require.Equal(t, auth.Service, sid.Kind)
	_, err = chain.Authenticate(context.Background(), "garbage")
	require.ErrorIs(t, err, auth.ErrUnknownToken)
}
