package api

import (
	"context"
	"time"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

type runServer struct {
	policyv1.UnimplementedRunServiceServer
	h *handlers
}

// RecordRun never reads a viewer from the request: the store computes it from the origin and
// the authenticated credential.
func (s *runServer) RecordRun(ctx context.Context, req *policyv1.RecordRunRequest) (*policyv1.RecordRunResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.RecordRunResponse, error) {
		origin, _ := origins.fromProto(req.GetOrigin())
		var cred []byte
		if req.GetCredential() != "" {
			cred = rulebook.Digest(req.GetCredential())
		}
		secret, digest := rulebook.NewSecret(rulebook.PrefixJob)
		run, err := s.h.Store.RecordRun(ctx, store.NewRun{
			Workspace: req.GetWorkspace(), JobID: req.GetJobId(), PermissionedAs: req.GetPermissionedAs(),
			Origin: origin, CredentialDigest: cred,
			TokenID: rulebook.NewTokenID(), TokenDigest: digest, ExpiresAt: time.Now().Add(s.h.JobTokenTTL),
		})
		if err != nil {
			return nil, taken(err, "run", req.GetJobId())
		}
		return &policyv1.RecordRunResponse{JobToken: secret, Run: runToProto(run)}, nil
	})
}

// jobToken is the job token a request is about: a job token's own bearer (it may not ask about
// another run), or the request field for the service and superadmin tokens.
func jobToken(ctx context.Context, c Caller, given string) (string, error) {
	if c.ID.Kind == auth.Job {
		bearer, err := auth.BearerToken(ctx)
		if err != nil {
			return "", err
		}
		if given != "" && given != bearer {
			return "", denied(commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, "a job token may only ask about its own run", nil)
		}
		return bearer, nil
	}
	if given == "" {
		return "", errs.InvalidField("job_token", "required", "job_token is required")
	}
	return given, nil
}

func (s *runServer) runOf(ctx context.Context, given string) (store.Run, error) {
	c, err := s.h.authorize(ctx, "")
	if err != nil {
		return store.Run{}, err
	}
	tok, err := jobToken(ctx, c, given)
	if err != nil {
		return store.Run{}, err
	}
	if !rulebook.LooksLikeToken(tok) {
		return store.Run{}, mapErr(rulebook.ErrBadCredential)
	}
	run, err := s.h.Store.RunByToken(ctx, rulebook.Digest(tok))
	return run, mapErr(err)
}

func (s *runServer) GetRunIdentity(ctx context.Context, req *policyv1.GetRunIdentityRequest) (*policyv1.GetRunIdentityResponse, error) {
	run, err := s.runOf(ctx, req.GetJobToken())
	if err != nil {
		return nil, err
	}
	return &policyv1.GetRunIdentityResponse{Run: runToProto(run)}, nil
}

func (s *runServer) FinishRun(ctx context.Context, req *policyv1.FinishRunRequest) (*policyv1.FinishRunResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.FinishRunResponse, error) {
		return &policyv1.FinishRunResponse{}, s.h.Store.FinishRun(ctx, req.GetWorkspace(), req.GetJobId())
	})
}

func (s *runServer) ResultCacheKey(ctx context.Context, req *policyv1.ResultCacheKeyRequest) (*policyv1.ResultCacheKeyResponse, error) {
	run, err := s.runOf(ctx, req.GetJobToken())
	if err != nil {
		return nil, err
	}
	key, err := rulebook.ResultCacheKey(run.Workspace, req.GetKind(), rulebook.Runnable{Hash: req.GetScriptHash(), Path: req.GetPath()},
		[]byte(req.GetArgsJson()), run.Viewer)
	if err != nil {
		return nil, errs.InvalidField("args_json", "json_object", err.Error())
	}
	return &policyv1.ResultCacheKeyResponse{Key: key, ResourcePath: "g/results/" + key}, nil
}
