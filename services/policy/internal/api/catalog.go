package api

import (
	"context"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

type catalogServer struct {
	policyv1.UnimplementedCatalogServiceServer
	h *handlers
}

func perms(list []*policyv1.ExtraPerm) map[string]bool {
	out := make(map[string]bool, len(list))
	for _, p := range list {
		out[p.GetPrincipal()] = p.GetWrite()
	}
	return out
}

func (s *catalogServer) register(ctx context.Context, r store.Runnable) error {
	if _, err := s.h.authorize(ctx, r.Workspace); err != nil {
		return err
	}
	return mapErr(s.h.Store.RegisterRunnable(ctx, r))
}

func (s *catalogServer) RegisterScript(ctx context.Context, req *policyv1.RegisterScriptRequest) (*policyv1.RegisterScriptResponse, error) {
	err := s.register(ctx, store.Runnable{Workspace: req.GetWorkspace(), Kind: rulebook.KindScript, Path: req.GetPath(),
		LatestHash: req.GetLatestHash(), Versions: req.GetVersionHashes(), OnBehalfOf: req.GetOnBehalfOf(),
		ExtraPerms: perms(req.GetExtraPerms())})
	if err != nil {
		return nil, err
	}
	return &policyv1.RegisterScriptResponse{}, nil
}

func (s *catalogServer) RegisterFlow(ctx context.Context, req *policyv1.RegisterFlowRequest) (*policyv1.RegisterFlowResponse, error) {
	err := s.register(ctx, store.Runnable{Workspace: req.GetWorkspace(), Kind: rulebook.KindFlow, Path: req.GetPath(),
		OnBehalfOf: req.GetOnBehalfOf(), ExtraPerms: perms(req.GetExtraPerms())})
	if err != nil {
		return nil, err
	}
	return &policyv1.RegisterFlowResponse{}, nil
}

func (s *catalogServer) RegisterApp(ctx context.Context, req *policyv1.RegisterAppRequest) (*policyv1.RegisterAppResponse, error) {
	err := s.register(ctx, store.Runnable{Workspace: req.GetWorkspace(), Kind: rulebook.KindApp, Path: req.GetPath(),
		OnBehalfOf: req.GetOnBehalfOf(), ExtraPerms: perms(req.GetExtraPerms())})
	if err != nil {
		return nil, err
	}
	return &policyv1.RegisterAppResponse{}, nil
}

func (s *catalogServer) RemoveRunnable(ctx context.Context, req *policyv1.RemoveRunnableRequest) (*policyv1.RemoveRunnableResponse, error) {
	if _, err := s.h.authorize(ctx, req.GetWorkspace()); err != nil {
		return nil, err
	}
	k, _ := kindFromProto(req.GetKind())
	if err := s.h.Store.RemoveRunnable(ctx, req.GetWorkspace(), k, req.GetPath()); err != nil {
		return nil, mapErr(err)
	}
	return &policyv1.RemoveRunnableResponse{}, nil
}

func (s *catalogServer) ListReadable(ctx context.Context, req *policyv1.ListReadableRequest) (*policyv1.ListReadableResponse, error) {
	_, who, err := s.h.actingFor(ctx, req.GetWorkspace(), req.GetUsername())
	if err != nil {
		return nil, err
	}
	k, _ := kindFromProto(req.GetKind()) // unspecified: "" = every kind
	items, err := s.h.Store.ListReadable(ctx, who, req.GetWorkspace(), k)
	if err != nil {
		return nil, mapErr(err)
	}
	out := &policyv1.ListReadableResponse{}
	for _, it := range items {
		out.Runnables = append(out.Runnables, &policyv1.Runnable{Kind: kindToProto(it.Kind), Path: it.Path,
			LatestHash: it.LatestHash, OnBehalfOf: it.OnBehalfOf})
	}
	return out, nil
}

func (s *catalogServer) CheckReadable(ctx context.Context, req *policyv1.CheckReadableRequest) (*policyv1.CheckReadableResponse, error) {
	_, who, err := s.h.actingFor(ctx, req.GetWorkspace(), req.GetUsername())
	if err != nil {
		return nil, err
	}
	refs := make([]rulebook.Ref, len(req.GetRefs()))
	for i, r := range req.GetRefs() {
		k, _ := kindFromProto(r.GetKind())
		refs[i] = rulebook.Ref{Kind: k, Path: r.GetPath()}
	}
	ok, err := s.h.Store.ReadablePaths(ctx, who, req.GetWorkspace(), refs)
	if err != nil {
		return nil, mapErr(err)
	}
	for _, r := range refs {
		if _, yes := ok[r]; !yes {
			return nil, mapErr(&rulebook.UnreadableError{Ref: r})
		}
	}
	return &policyv1.CheckReadableResponse{}, nil
}
