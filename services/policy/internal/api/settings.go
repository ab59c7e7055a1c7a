package api

import (
	"context"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

type settingsServer struct {
	policyv1.UnimplementedSettingsServiceServer
	h *handlers
}

func (s *settingsServer) GetOperatorSettings(ctx context.Context, req *policyv1.GetOperatorSettingsRequest) (*policyv1.GetOperatorSettingsResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetOperatorSettingsResponse, error) {
		st, err := s.h.Settings.Get(ctx, req.GetWorkspace())
		if err != nil {
			return nil, err
		}
		return &policyv1.GetOperatorSettingsResponse{Settings: settingsToProto(st)}, nil
	})
}

func (s *settingsServer) UpdateOperatorSettings(ctx context.Context, req *policyv1.UpdateOperatorSettingsRequest) (*policyv1.UpdateOperatorSettingsResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.UpdateOperatorSettingsResponse, error) {
		ch, err := s.h.Settings.Update(ctx, req.GetWorkspace(), patchFromProto(req.GetPatch()))
		if err != nil {
			return nil, err
		}
		return &policyv1.UpdateOperatorSettingsResponse{Settings: settingsToProto(ch.After), StreamPosition: ch.Position}, nil
	})
}

func (s *settingsServer) CheckOperatorCanBuild(ctx context.Context, req *policyv1.CheckOperatorCanBuildRequest) (*policyv1.CheckOperatorCanBuildResponse, error) {
	t, err := s.h.tenancyFor(ctx, req.GetWorkspace(), req.GetUsername())
	if err != nil {
		return nil, err
	}
	if err := s.h.Settings.CanBuild(ctx, req.GetWorkspace(), t.Role); err != nil {
		return nil, mapErr(err)
	}
	return &policyv1.CheckOperatorCanBuildResponse{Role: roles.toProto(t.Role)}, nil
}
