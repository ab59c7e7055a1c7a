package api_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/api"
)

// TestEveryMethodHasARuleAndValidator keeps the authorization table and the validators
// complete: a new RPC without either is refused at run time, and this test names it.
func TestEveryMethodHasARuleAndValidator(t *testing.T) {
	require.Empty(t, api.Validators().Missing(api.ServiceDescs...))
	seen := map[string]bool{}
	for _, sd := range api.ServiceDescs {
		for _, m := range sd.Methods {
			seen["/"+sd.ServiceName+"/"+m.MethodName] = true
		}
		for _, m := range sd.Streams {
			seen["/"+sd.ServiceName+"/"+m.StreamName] = true
		}
	}
	for m := range seen {
		_, ok := api.Rules[m]
		require.True(t, ok, "no authorization rule for %s", m)
	}
	for m := range api.Rules {
		require.True(t, seen[m], "rule for unknown method %s", m)
	}
}

func TestAuthorization(t *testing.T) {
	r := replicaWith(t, "a", "b")
	member(t, r, "a", "dev", policyv1.Role_ROLE_DEVELOPER)
	member(t, r, "a", "op", policyv1.Role_ROLE_OPERATOR)
	member(t, r, "a", "gone", policyv1.Role_ROLE_OPERATOR)
	member(t, r, "a", "off", policyv1.Role_ROLE_OPERATOR)
	adminA := userToken(t, r, "a", "admin")
	dev := userToken(t, r, "a", "dev")
	op := userToken(t, r, "a", "op")
	scoped := userToken(t, r, "a", "dev", "jobs:run")
	gone := userToken(t, r, "a", "gone")
	off := userToken(t, r, "a", "off")
	revoked, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "a", Username: "dev",
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))})
	require.NoError(t, err)
	_, err = r.tok.RevokeToken(as(adminA), &policyv1.RevokeTokenRequest{Workspace: "a", TokenId: revoked.GetTokenId()})
	require.NoError(t, err)
	_, err = r.ws.RemoveMember(admin, &policyv1.RemoveMemberRequest{Workspace: "a", Username: "gone"})
	require.NoError(t, err)
	_, err = r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "a", Username: "off", Email: "off@x",
		Role: policyv1.Role_ROLE_OPERATOR, Disabled: true})
	require.NoError(t, err)
	rec, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "a", JobId: "00000000-0000-0000-0000-000000000001",
		PermissionedAs: "u/dev", Origin: policyv1.RunOrigin_RUN_ORIGIN_SCHEDULE})
	require.NoError(t, err)
	job := rec.GetJobToken()

	settingsA := func(ctx context.Context) error {
		_, err := r.set.GetOperatorSettings(ctx, &policyv1.GetOperatorSettingsRequest{Workspace: "a"})
		return err
	}
	settingsB := func(ctx context.Context) error {
		_, err := r.set.GetOperatorSettings(ctx, &policyv1.GetOperatorSettingsRequest{Workspace: "b"})
		return err
	}
	upsertA := func(ctx context.Context) error {
		_, err := r.ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: "a", Username: "new", Email: "new@x", Role: policyv1.Role_ROLE_OPERATOR})
		return err
	}
	createWS := func(ctx context.Context) error {
		_, err := r.ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "c", Name: "c", AdminEmail: "a@x", AdminUsername: "a"})
		return err
	}
	resolve := func(ctx context.Context) error {
		_, err := r.ws.ResolveTenancy(ctx, &policyv1.ResolveTenancyRequest{Workspace: "a", Email: "dev@x"})
		return err
	}
	recordRun := func(ctx context.Context) error {
		_, err := r.run.RecordRun(ctx, &policyv1.RecordRunRequest{Workspace: "a", JobId: "00000000-0000-0000-0000-0000000000ff",
			PermissionedAs: "u/dev", Origin: policyv1.RunOrigin_RUN_ORIGIN_TRIGGER})
		return err
	}
	ownRun := func(ctx context.Context) error {
		_, err := r.run.GetRunIdentity(ctx, &policyv1.GetRunIdentityRequest{})
		return err
	}
	listReadable := func(ctx context.Context) error {
		_, err := r.cat.ListReadable(ctx, &policyv1.ListReadableRequest{Workspace: "a"})
		return err
	}
	listForOther := func(ctx context.Context) error {
		_, err := r.cat.ListReadable(ctx, &policyv1.ListReadableRequest{Workspace: "a", Username: "admin"})
		return err
	}
	watch := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := r.ev.Watch(ctx, &policyv1.WatchRequest{AfterId: -1})
		if err != nil {
			return err
		}
		// A refusal arrives as the stream's first Recv error; an accepted stream just waits.
		_, err = s.Recv()
		if ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded {
			return nil // the stream was accepted and simply waited for events
		}
		return err
	}
	OK := codes.OK
	cases := []struct {
		name   string
		ctx    context.Context
		call   func(context.Context) error
		code   codes.Code
		reason commonv1.ErrorReason
	}{
		{"no token", context.Background(), settingsA, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"garbage token", as("nope"), settingsA, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"forged policy-looking token", as("mwu_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), settingsA, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"revoked token", as(revoked.GetToken()), settingsA, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"removed member's token", as(gone), settingsA, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"disabled member's token", as(off), settingsA, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		{"member reads own workspace", as(op), settingsA, OK, 0},
		{"token of A on workspace B", as(adminA), settingsB, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE},
		{"superadmin anywhere", admin, settingsB, OK, 0},
		{"admin manages members", as(adminA), upsertA, OK, 0},
		{"developer cannot manage members", as(dev), upsertA, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"scoped token lacks scope", as(scoped), settingsA, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MISSING_SCOPE},
		{"only superadmin creates workspaces", service, createWS, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"workspace admin cannot create workspaces", as(adminA), createWS, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"service resolves tenancy", service, resolve, OK, 0},
		{"user cannot resolve tenancy", as(adminA), resolve, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"user cannot record runs", as(adminA), recordRun, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"job token cannot record runs", as(job), recordRun, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"job token reads its own run", as(job), ownRun, OK, 0},
		{"job token cannot list the catalog", as(job), listReadable, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"user token lists for itself", as(op), listReadable, OK, 0},
		{"user token cannot list for another user", as(op), listForOther, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"service token watches", service, watch, OK, 0},
		{"user token cannot watch", as(adminA), watch, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(tc.ctx)
			if tc.code == codes.OK {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, tc.code, tc.reason)
		})
	}
}

func TestCreateTokenRules(t *testing.T) {
	r := replicaWith(t, "a")
	member(t, r, "a", "dev", policyv1.Role_ROLE_DEVELOPER)
	exp := timestamppb.New(time.Now().Add(time.Hour)) // before the tokens below, which expire in an hour
	dev := userToken(t, r, "a", "dev")
	scoped := userToken(t, r, "a", "dev", "tokens:write", "jobs:run")
	_, err := r.tok.CreateToken(as(dev), &policyv1.CreateTokenRequest{Workspace: "a", Username: "admin", ExpiresAt: exp})
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED)
	_, err = r.tok.CreateToken(as(scoped), &policyv1.CreateTokenRequest{Workspace: "a", ExpiresAt: exp})
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MISSING_SCOPE) // would be unrestricted
	_, err = r.tok.CreateToken(as(scoped), &policyv1.CreateTokenRequest{Workspace: "a", Scopes: []string{"apps:write"}, ExpiresAt: exp})
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MISSING_SCOPE)
	resp, err := r.tok.CreateToken(as(scoped), &policyv1.CreateTokenRequest{Workspace: "a", Scopes: []string{"jobs:run"}, ExpiresAt: exp})
	require.NoError(t, err)
	id, err := r.tok.Authenticate(service, &policyv1.AuthenticateRequest{Token: resp.GetToken()})
	require.NoError(t, err)
	require.Equal(t, []string{"jobs:run"}, id.GetScopes())
	require.Equal(t, "dev", id.GetUsername())
	require.Positive(t, id.GetStreamPosition())
	// A developer cannot revoke another member's token (NotFound: ids are not probeable).
	adminTok, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "a", Username: "admin", ExpiresAt: exp})
	require.NoError(t, err)
	_, err = r.tok.RevokeToken(as(dev), &policyv1.RevokeTokenRequest{Workspace: "a", TokenId: adminTok.GetTokenId()})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)

	// A token never mints one that outlives it (a leaked token cannot keep itself alive).
	short, err := r.tok.CreateToken(admin, &policyv1.CreateTokenRequest{Workspace: "a", Username: "dev", ExpiresAt: exp})
	require.NoError(t, err)
	_, err = r.tok.CreateToken(as(short.GetToken()), &policyv1.CreateTokenRequest{Workspace: "a",
		ExpiresAt: timestamppb.New(exp.AsTime().Add(time.Minute))})
	requireCode(t, err, codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
	require.Contains(t, err.Error(), "expires_at")
	_, err = r.tok.CreateToken(as(short.GetToken()), &policyv1.CreateTokenRequest{Workspace: "a", ExpiresAt: exp})
	require.NoError(t, err, "up to its own expiry is fine")
}

// TestTokensNotStoredInClear reads the token table directly: no column holds the secret; the
// digest column is sha256 of it.
func TestTokensNotStoredInClear(t *testing.T) {
	r := replicaWith(t, "a")
	secret := userToken(t, r, "a", "admin")
	rec, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "a", JobId: "00000000-0000-0000-0000-000000000001",
		PermissionedAs: "u/admin", Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: secret})
	require.NoError(t, err)
	conn, err := pgx.Connect(context.Background(), r.dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for _, s := range []string{secret, rec.GetJobToken()} {
		var n int
		// Every column of every row, as text, and the payloads of the stream.
		require.NoError(t, conn.QueryRow(context.Background(), `
			SELECT (SELECT count(*) FROM token t WHERE strpos(t::text, $1) > 0)
			     + (SELECT count(*) FROM run r WHERE strpos(r::text, $1) > 0)
			     + (SELECT count(*) FROM stream_outbox o WHERE strpos(o::text, $1) > 0)`, s).Scan(&n))
		require.Zero(t, n, "secret found in clear")
		d := sha256.Sum256([]byte(s))
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM token WHERE digest = $1`, d[:]).Scan(&n))
		require.Equal(t, 1, n)
	}
}
