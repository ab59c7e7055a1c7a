package api

import (
	"context"
	"fmt"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/paging"
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

// register authorizes the call on r's workspace and registers r; answer is the RPC's
// (empty) response.
func register[R any](ctx context.Context, s *catalogServer, r store.Runnable, answer *R) (*R, error) {
	return authorized(ctx, s.h, r.Workspace, func() (*R, error) {
		return answer, s.h.Store.RegisterRunnable(ctx, r)
	})
}

func (s *catalogServer) RegisterScript(ctx context.Context, req *policyv1.RegisterScriptRequest) (*policyv1.RegisterScriptResponse, error) {
	return register(ctx, s, store.Runnable{Workspace: req.GetWorkspace(), Kind: rulebook.KindScript, Path: req.GetPath(),
		LatestHash: req.GetLatestHash(), Versions: req.GetVersionHashes(), OnBehalfOf: req.GetOnBehalfOf(),
		ExtraPerms: perms(req.GetExtraPerms())}, &policyv1.RegisterScriptResponse{})
}

func (s *catalogServer) RegisterFlow(ctx context.Context, req *policyv1.RegisterFlowRequest) (*policyv1.RegisterFlowResponse, error) {
	return register(ctx, s, store.Runnable{Workspace: req.GetWorkspace(), Kind: rulebook.KindFlow, Path: req.GetPath(),
		OnBehalfOf: req.GetOnBehalfOf(), ExtraPerms: perms(req.GetExtraPerms())}, &policyv1.RegisterFlowResponse{})
}

func (s *catalogServer) RegisterApp(ctx context.Context, req *policyv1.RegisterAppRequest) (*policyv1.RegisterAppResponse, error) {
	return register(ctx, s, store.Runnable{Workspace: req.GetWorkspace(), Kind: rulebook.KindApp, Path: req.GetPath(),
		OnBehalfOf: req.GetOnBehalfOf(), ExtraPerms: perms(req.GetExtraPerms())}, &policyv1.RegisterAppResponse{})
}

func (s *catalogServer) RemoveRunnable(ctx context.Context, req *policyv1.RemoveRunnableRequest) (*policyv1.RemoveRunnableResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.RemoveRunnableResponse, error) {
		k, _ := kinds.fromProto(req.GetKind())
		return &policyv1.RemoveRunnableResponse{}, s.h.Store.RemoveRunnable(ctx, req.GetWorkspace(), k, req.GetPath())
	})
}

func (s *catalogServer) ListReadable(ctx context.Context, req *policyv1.ListReadableRequest) (*policyv1.ListReadableResponse, error) {
	_, who, err := s.h.actingFor(ctx, req.GetWorkspace(), req.GetUsername())
	if err != nil {
		return nil, err
	}
	k, _ := kinds.fromProto(req.GetKind()) // unspecified: "" = every kind
	filters := fmt.Sprint(req.GetWorkspace(), "|", who, "|", k)
	pg, err := paging.Parse(req.GetPageSize(), req.GetPageToken(), filters, 2)
	if err != nil {
		return nil, err
	}
	after := pg.After
	if after == nil {
		after = []string{"", ""}
	}
	items, err := s.h.Store.ListReadable(ctx, who, req.GetWorkspace(), k, after[0], after[1], pg.Limit())
	if err != nil {
		return nil, mapErr(err)
	}
	items, next := paging.Next(pg, items, func(it store.Item) []string { return []string{string(it.Kind), it.Path} })
	out := &policyv1.ListReadableResponse{NextPageToken: next}
	for _, it := range items {
		out.Runnables = append(out.Runnables, &policyv1.Runnable{Kind: kinds.toProto(it.Kind), Path: it.Path,
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
		k, _ := kinds.fromProto(r.GetKind())
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
