package api

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/validate"
	"github.com/millwright/millwright/services/policy/internal/authn"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

type tokenServer struct {
	policyv1.UnimplementedTokenServiceServer
	h *handlers
}

func (s *tokenServer) CreateToken(ctx context.Context, req *policyv1.CreateTokenRequest) (*policyv1.CreateTokenResponse, error) {
	c, who, err := s.h.actingFor(ctx, req.GetWorkspace(), req.GetUsername())
	if err != nil {
		return nil, err
	}
	// A restricted token mints only within its own scopes (and never an unrestricted one).
	if !rulebook.ScopesWithin(req.GetScopes(), c.ID.Scopes) {
		return nil, denied(commonv1.ErrorReason_ERROR_REASON_MISSING_SCOPE,
			"a scoped token can only create tokens with a subset of its scopes", map[string]string{"field": "scopes"})
	}
	exp := req.GetExpiresAt().AsTime()
	// Nor one that outlives it: otherwise a leaked token could keep itself alive for good by
	// minting its successor before it expires.
	// (At the database's microsecond precision: a token may mint one with its own expiry.)
	if !c.ID.ExpiresAt.IsZero() && exp.Truncate(time.Microsecond).After(c.ID.ExpiresAt) {
		return nil, errs.InvalidField("expires_at", validate.RuleMax,
			"expires_at must not be later than the expiry of the token that creates it ("+c.ID.ExpiresAt.UTC().Format(time.RFC3339)+")")
	}
	secret, digest := rulebook.NewSecret(rulebook.PrefixUser)
	id := rulebook.NewTokenID()
	err = s.h.Store.CreateUserToken(ctx, store.UserToken{ID: id, Digest: digest, Workspace: req.GetWorkspace(),
		Username: who, Scopes: rulebook.Normalize(req.GetScopes()), Label: req.GetLabel(), ExpiresAt: exp})
	if err != nil {
		return nil, mapErr(err)
	}
	audit.Note(ctx, "token_id", id)
	s.h.noteSecret(ctx, "token", secret)
	return &policyv1.CreateTokenResponse{Token: secret, TokenId: id, ExpiresAt: timestamppb.New(exp)}, nil
}

func (s *tokenServer) RevokeToken(ctx context.Context, req *policyv1.RevokeTokenRequest) (*policyv1.RevokeTokenResponse, error) {
	c, err := s.h.authorize(ctx, req.GetWorkspace())
	if err != nil {
		return nil, err
	}
	onlyUser := "" // superadmin and workspace admins revoke any token of the workspace
	if c.Tenancy != nil && !c.Tenancy.IsAdmin() {
		onlyUser = c.ID.Username
	}
	if err := s.h.Store.RevokeToken(ctx, req.GetWorkspace(), req.GetTokenId(), onlyUser); err != nil {
		return nil, mapErr(err)
	}
	return &policyv1.RevokeTokenResponse{}, nil
}

func (s *tokenServer) Authenticate(ctx context.Context, req *policyv1.AuthenticateRequest) (*policyv1.AuthenticateResponse, error) {
	if _, err := s.h.authorize(ctx, ""); err != nil {
		return nil, err
	}
	if !rulebook.LooksLikeToken(req.GetToken()) {
		return nil, auth.Unauthenticated("token is unknown, expired or revoked")
	}
	t, head, err := s.h.Store.AuthenticateAt(ctx, rulebook.Digest(req.GetToken()))
	if err != nil {
		return nil, mapErr(err)
	}
	id := authn.Identity(t)
	out := &policyv1.AuthenticateResponse{Workspace: id.Workspace, Username: id.Username, Email: id.Email,
		Scopes: id.Scopes, JobId: id.JobID, TokenId: id.TokenID, ExpiresAt: timestamppb.New(t.ExpiresAt), StreamPosition: head}
	switch id.Kind {
	case auth.User:
		out.Kind = policyv1.TokenKind_TOKEN_KIND_USER
	case auth.Job:
		out.Kind = policyv1.TokenKind_TOKEN_KIND_JOB
	default: // the token store holds user and job tokens only: anything else is refused
		return nil, mapErr(rulebook.ErrBadCredential)
	}
	return out, nil
}
