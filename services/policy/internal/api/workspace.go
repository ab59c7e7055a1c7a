package api

import (
	"context"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

type workspaceServer struct {
	policyv1.UnimplementedWorkspaceServiceServer
	h *handlers
}

func (s *workspaceServer) CreateWorkspace(ctx context.Context, req *policyv1.CreateWorkspaceRequest) (*policyv1.CreateWorkspaceResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.CreateWorkspaceResponse, error) {
		first := store.Member{Workspace: req.GetWorkspace(), Username: req.GetAdminUsername(),
			Email: req.GetAdminEmail(), Role: rulebook.RoleAdmin}
		err := s.h.Store.CreateWorkspace(ctx, req.GetWorkspace(), req.GetName(), first, s.h.Settings.MemberCheck(first))
		return &policyv1.CreateWorkspaceResponse{Workspace: req.GetWorkspace()}, taken(err, "workspace", req.GetWorkspace())
	})
}

func (s *workspaceServer) UpsertMember(ctx context.Context, req *policyv1.UpsertMemberRequest) (*policyv1.UpsertMemberResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.UpsertMemberResponse, error) {
		role, _ := roles.fromProto(req.GetRole())
		m := store.Member{Workspace: req.GetWorkspace(), Username: req.GetUsername(),
			Email: req.GetEmail(), Role: role, Disabled: req.GetDisabled()}
		m, err := s.h.Store.UpsertMember(ctx, m, s.h.Settings.MemberCheck(m))
		if err != nil {
			return nil, err
		}
		return &policyv1.UpsertMemberResponse{Member: memberToProto(m)}, nil
	})
}

func (s *workspaceServer) RemoveMember(ctx context.Context, req *policyv1.RemoveMemberRequest) (*policyv1.RemoveMemberResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.RemoveMemberResponse, error) {
		return &policyv1.RemoveMemberResponse{}, s.h.Store.RemoveMember(ctx, req.GetWorkspace(), req.GetUsername())
	})
}

func (s *workspaceServer) UpsertGroup(ctx context.Context, req *policyv1.UpsertGroupRequest) (*policyv1.UpsertGroupResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.UpsertGroupResponse, error) {
		members, err := s.h.Store.UpsertGroup(ctx, req.GetWorkspace(), req.GetName(), req.GetMembers())
		return &policyv1.UpsertGroupResponse{Name: req.GetName(), Members: members}, err
	})
}

func (s *workspaceServer) DeleteGroup(ctx context.Context, req *policyv1.DeleteGroupRequest) (*policyv1.DeleteGroupResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.DeleteGroupResponse, error) {
		return &policyv1.DeleteGroupResponse{}, s.h.Store.DeleteGroup(ctx, req.GetWorkspace(), req.GetName())
	})
}

func (s *workspaceServer) UpsertFolder(ctx context.Context, req *policyv1.UpsertFolderRequest) (*policyv1.UpsertFolderResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.UpsertFolderResponse, error) {
		f, err := s.h.Store.UpsertFolder(ctx, req.GetWorkspace(), rulebook.FolderGrants{Name: req.GetName(),
			Owners: req.GetOwners(), Readers: req.GetReaders(), Writers: req.GetWriters()})
		return &policyv1.UpsertFolderResponse{Folder: &policyv1.Folder{Name: f.Name, Owners: f.Owners, Readers: f.Readers, Writers: f.Writers}}, err
	})
}

func (s *workspaceServer) DeleteFolder(ctx context.Context, req *policyv1.DeleteFolderRequest) (*policyv1.DeleteFolderResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.DeleteFolderResponse, error) {
		return &policyv1.DeleteFolderResponse{}, s.h.Store.DeleteFolder(ctx, req.GetWorkspace(), req.GetName())
	})
}

func (s *workspaceServer) ResolveTenancy(ctx context.Context, req *policyv1.ResolveTenancyRequest) (*policyv1.ResolveTenancyResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.ResolveTenancyResponse, error) {
		by, key := store.ByEmail, req.GetEmail()
		if req.GetUsername() != "" {
			by, key = store.ByUsername, req.GetUsername()
		}
		t, err := s.h.Store.ResolveTenancy(ctx, req.GetWorkspace(), by, key)
		if err != nil {
			return nil, err
		}
		return tenancyToProto(t), nil
	})
}

func (s *workspaceServer) GetMembershipSnapshot(ctx context.Context, _ *policyv1.GetMembershipSnapshotRequest) (*policyv1.GetMembershipSnapshotResponse, error) {
	return authorized(ctx, s.h, "", func() (*policyv1.GetMembershipSnapshotResponse, error) {
		snap, err := s.h.Store.MembershipSnapshot(ctx)
		out := &policyv1.GetMembershipSnapshotResponse{StreamPosition: snap.Position}
		for _, m := range snap.Members {
			out.Members = append(out.Members, memberToProto(m))
		}
		for _, w := range snap.Workspaces {
			out.Workspaces = append(out.Workspaces, &policyv1.WorkspaceBuilder{Workspace: w.Workspace, Builder: w.Builder})
		}
		return out, err
	})
}
