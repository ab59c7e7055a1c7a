package api

import (
	"context"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

type tagServer struct {
	policyv1.UnimplementedTagServiceServer
	h *handlers
}

func (s *tagServer) SetWorkerTags(ctx context.Context, req *policyv1.SetWorkerTagsRequest) (*policyv1.SetWorkerTagsResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.SetWorkerTagsResponse, error) {
		rules := make([]rulebook.TagRule, len(req.GetTags()))
		for i, t := range req.GetTags() {
			rules[i] = rulebook.TagRule{Name: t.GetName(), Privileged: t.GetPrivileged()}
		}
		return &policyv1.SetWorkerTagsResponse{}, s.h.Store.SetWorkerTags(ctx, req.GetWorkspace(), rules)
	})
}

func (s *tagServer) GetWorkerTags(ctx context.Context, req *policyv1.GetWorkerTagsRequest) (*policyv1.GetWorkerTagsResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetWorkerTagsResponse, error) {
		rules, err := s.h.Store.WorkerTags(ctx, req.GetWorkspace())
		if err != nil {
			return nil, err
		}
		out := &policyv1.GetWorkerTagsResponse{}
		for _, r := range rules {
			out.Tags = append(out.Tags, &policyv1.WorkerTag{Name: r.Name, Privileged: r.Privileged})
		}
		return out, nil
	})
}

func (s *tagServer) CheckTags(ctx context.Context, req *policyv1.CheckTagsRequest) (*policyv1.CheckTagsResponse, error) {
	t, err := s.h.tenancyFor(ctx, req.GetWorkspace(), req.GetUsername())
	if err != nil {
		return nil, err
	}
	rules, err := s.h.Store.WorkerTags(ctx, req.GetWorkspace())
	if err != nil {
		return nil, mapErr(err)
	}
	if err := rulebook.CheckTags(rules, t.Role, req.GetTags()); err != nil {
		return nil, mapErr(err)
	}
	return &policyv1.CheckTagsResponse{}, nil
}
