package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/pkg/errs"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/paging"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

// The read-back API (issue 17): a Get and a List for every resource that can be created.
// Authorization is Rules'; a List is one page (pkg/paging), read by key.

// list is the shape of every List handler: authorize on ws, decode the page token against
// the request's filters (any string naming them), read one page after that key ("" parts: the
// first page) and encode the token of the page after it, if any (store.keyset decides).
func list[T any](ctx context.Context, h *handlers, ws string, req paging.Request, filters string, keyParts int,
	read func(c Caller, after []string, limit int) ([]T, []string, error)) ([]T, string, error) {
	c, err := h.authorize(ctx, ws)
	if err != nil {
		return nil, "", err
	}
	pg, err := paging.Parse(req.GetPageSize(), req.GetPageToken(), filters, keyParts)
	if err != nil {
		return nil, "", err
	}
	after := pg.After
	if after == nil {
		after = make([]string, keyParts) // "" sorts before every name and id
	}
	rows, next, err := read(c, after, pg.Size)
	if errors.Is(err, store.ErrBadKey) {
		return nil, "", errs.InvalidField("page_token", paging.RuleToken, "page_token is not a token this service issued")
	}
	if err != nil {
		return nil, "", mapErr(err)
	}
	if next == nil {
		return rows, "", nil
	}
	return rows, paging.Encode(filters, next...), nil
}

func convert[T, P any](rows []T, f func(T) P) []P {
	out := make([]P, len(rows))
	for i, r := range rows {
		out[i] = f(r)
	}
	return out
}

// ---- workspaces, members, groups, folders

func (s *workspaceServer) GetWorkspace(ctx context.Context, req *policyv1.GetWorkspaceRequest) (*policyv1.GetWorkspaceResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetWorkspaceResponse, error) {
		w, err := s.h.Store.GetWorkspace(ctx, req.GetWorkspace())
		return &policyv1.GetWorkspaceResponse{Workspace: workspaceToProto(w)}, err
	})
}

func (s *workspaceServer) ListWorkspaces(ctx context.Context, req *policyv1.ListWorkspacesRequest) (*policyv1.ListWorkspacesResponse, error) {
	rows, next, err := list(ctx, s.h, "", req, "", 1, func(_ Caller, after []string, limit int) ([]store.Workspace, []string, error) {
		return s.h.Store.ListWorkspaces(ctx, after[0], limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListWorkspacesResponse{Workspaces: convert(rows, workspaceToProto), NextPageToken: next}, nil
}

func workspaceToProto(w store.Workspace) *policyv1.Workspace {
	return &policyv1.Workspace{Workspace: w.ID, Name: w.Name, CreateTime: timestamppb.New(w.CreatedAt)}
}

func (s *workspaceServer) GetMember(ctx context.Context, req *policyv1.GetMemberRequest) (*policyv1.GetMemberResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetMemberResponse, error) {
		m, err := s.h.Store.GetMember(ctx, req.GetWorkspace(), req.GetUsername())
		return &policyv1.GetMemberResponse{Member: memberToProto(m)}, err
	})
}

func (s *workspaceServer) ListMembers(ctx context.Context, req *policyv1.ListMembersRequest) (*policyv1.ListMembersResponse, error) {
	role, _ := roles.fromProto(req.GetRole()) // unspecified: "" = every role
	filters := fmt.Sprint(req.GetWorkspace(), "|", role, "|", req.GetIncludeDisabled())
	rows, next, err := list(ctx, s.h, req.GetWorkspace(), req, filters, 1, func(_ Caller, after []string, limit int) ([]store.Member, []string, error) {
		return s.h.Store.ListMembers(ctx, req.GetWorkspace(), role, req.GetIncludeDisabled(), after[0], limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListMembersResponse{Members: convert(rows, memberToProto), NextPageToken: next}, nil
}

func groupToProto(g store.Group) *policyv1.Group {
	return &policyv1.Group{Name: g.Name, Members: g.Members}
}

func (s *workspaceServer) GetGroup(ctx context.Context, req *policyv1.GetGroupRequest) (*policyv1.GetGroupResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetGroupResponse, error) {
		g, err := s.h.Store.GetGroup(ctx, req.GetWorkspace(), req.GetName())
		return &policyv1.GetGroupResponse{Group: groupToProto(g)}, err
	})
}

func (s *workspaceServer) ListGroups(ctx context.Context, req *policyv1.ListGroupsRequest) (*policyv1.ListGroupsResponse, error) {
	filters := fmt.Sprint(req.GetWorkspace(), "|", req.GetMember())
	rows, next, err := list(ctx, s.h, req.GetWorkspace(), req, filters, 1, func(_ Caller, after []string, limit int) ([]store.Group, []string, error) {
		return s.h.Store.ListGroups(ctx, req.GetWorkspace(), req.GetMember(), after[0], limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListGroupsResponse{Groups: convert(rows, groupToProto), NextPageToken: next}, nil
}

func folderToProto(f rulebook.FolderGrants) *policyv1.Folder {
	return &policyv1.Folder{Name: f.Name, Owners: f.Owners, Readers: f.Readers, Writers: f.Writers}
}

func (s *workspaceServer) GetFolder(ctx context.Context, req *policyv1.GetFolderRequest) (*policyv1.GetFolderResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetFolderResponse, error) {
		f, err := s.h.Store.GetFolder(ctx, req.GetWorkspace(), req.GetName())
		return &policyv1.GetFolderResponse{Folder: folderToProto(f)}, err
	})
}

func (s *workspaceServer) ListFolders(ctx context.Context, req *policyv1.ListFoldersRequest) (*policyv1.ListFoldersResponse, error) {
	rows, next, err := list(ctx, s.h, req.GetWorkspace(), req, req.GetWorkspace(), 1, func(_ Caller, after []string, limit int) ([]rulebook.FolderGrants, []string, error) {
		return s.h.Store.ListFolders(ctx, req.GetWorkspace(), after[0], limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListFoldersResponse{Folders: convert(rows, folderToProto), NextPageToken: next}, nil
}

// ---- catalog

func runnableToProto(r store.Runnable) *policyv1.Runnable {
	return &policyv1.Runnable{Kind: kinds.toProto(r.Kind), Path: r.Path, LatestHash: r.LatestHash, OnBehalfOf: r.OnBehalfOf}
}

func (s *catalogServer) GetRunnable(ctx context.Context, req *policyv1.GetRunnableRequest) (*policyv1.GetRunnableResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetRunnableResponse, error) {
		k, _ := kinds.fromProto(req.GetKind())
		r, err := s.h.Store.GetRunnable(ctx, req.GetWorkspace(), k, req.GetPath())
		out := &policyv1.GetRunnableResponse{Runnable: runnableToProto(r)}
		for _, p := range slices.Sorted(maps.Keys(r.ExtraPerms)) {
			out.ExtraPerms = append(out.ExtraPerms, &policyv1.ExtraPerm{Principal: p, Write: r.ExtraPerms[p]})
		}
		return out, err
	})
}

func (s *catalogServer) ListRunnables(ctx context.Context, req *policyv1.ListRunnablesRequest) (*policyv1.ListRunnablesResponse, error) {
	k, _ := kinds.fromProto(req.GetKind()) // unspecified: "" = every kind
	filters := fmt.Sprint(req.GetWorkspace(), "|", k, "|", req.GetPathPrefix())
	rows, next, err := list(ctx, s.h, req.GetWorkspace(), req, filters, 2, func(_ Caller, after []string, limit int) ([]store.Runnable, []string, error) {
		return s.h.Store.ListRunnables(ctx, req.GetWorkspace(), k, req.GetPathPrefix(), after[0], after[1], limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListRunnablesResponse{Runnables: convert(rows, runnableToProto), NextPageToken: next}, nil
}

func (s *catalogServer) ListScriptVersions(ctx context.Context, req *policyv1.ListScriptVersionsRequest) (*policyv1.ListScriptVersionsResponse, error) {
	filters := fmt.Sprint(req.GetWorkspace(), "|", req.GetPath())
	rows, next, err := list(ctx, s.h, req.GetWorkspace(), req, filters, 1, func(_ Caller, after []string, limit int) ([]string, []string, error) {
		return s.h.Store.ListScriptVersions(ctx, req.GetWorkspace(), req.GetPath(), after[0], limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListScriptVersionsResponse{Hashes: rows, NextPageToken: next}, nil
}

// ---- runs

func runRecordToProto(r store.Run) *policyv1.GetRunResponse {
	out := &policyv1.GetRunResponse{Run: runToProto(r)}
	if r.FinishedAt != nil {
		out.FinishTime = timestamppb.New(*r.FinishedAt)
	}
	return out
}

func (s *runServer) GetRun(ctx context.Context, req *policyv1.GetRunRequest) (*policyv1.GetRunResponse, error) {
	return authorized(ctx, s.h, req.GetWorkspace(), func() (*policyv1.GetRunResponse, error) {
		r, err := s.h.Store.GetRun(ctx, req.GetWorkspace(), req.GetJobId())
		return runRecordToProto(r), err
	})
}

func (s *runServer) ListRuns(ctx context.Context, req *policyv1.ListRunsRequest) (*policyv1.ListRunsResponse, error) {
	filters := fmt.Sprint(req.GetWorkspace(), "|", req.GetPermissionedAs(), "|", req.GetRunningOnly())
	rows, next, err := list(ctx, s.h, req.GetWorkspace(), req, filters, 2, func(_ Caller, after []string, limit int) ([]store.Run, []string, error) {
		if after[0] == "" {
			after = nil // the first page: from the newest
		}
		return s.h.Store.ListRuns(ctx, req.GetWorkspace(), req.GetPermissionedAs(), req.GetRunningOnly(), after, limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListRunsResponse{Runs: convert(rows, runRecordToProto), NextPageToken: next}, nil
}

// ---- tokens

func tokenToProto(t store.TokenInfo) *policyv1.TokenInfo {
	out := &policyv1.TokenInfo{TokenId: t.ID, Username: t.Username, Scopes: t.Scopes, Label: t.Label,
		CreateTime: timestamppb.New(t.CreatedAt), ExpireTime: timestamppb.New(t.ExpiresAt)}
	if t.RevokedAt != nil {
		out.RevokeTime = timestamppb.New(*t.RevokedAt)
	}
	return out
}

// tokenOwner is whose tokens c may read: a member (not an admin) only its own ("" = anyone's).
// A member asking for another's is refused, as RevokeToken's narrowing would hide them anyway.
func tokenOwner(c Caller, requested string) (string, error) {
	if c.Tenancy == nil || c.Tenancy.IsAdmin() {
		return requested, nil
	}
	return subject(c, requested)
}

func (s *tokenServer) GetToken(ctx context.Context, req *policyv1.GetTokenRequest) (*policyv1.GetTokenResponse, error) {
	c, err := s.h.authorize(ctx, req.GetWorkspace())
	if err != nil {
		return nil, err
	}
	only, _ := tokenOwner(c, "")
	t, err := s.h.Store.GetToken(ctx, req.GetWorkspace(), req.GetTokenId(), only)
	if err != nil {
		return nil, mapErr(err)
	}
	return &policyv1.GetTokenResponse{TokenInfo: tokenToProto(t)}, nil
}

func (s *tokenServer) ListTokens(ctx context.Context, req *policyv1.ListTokensRequest) (*policyv1.ListTokensResponse, error) {
	filters := fmt.Sprint(req.GetWorkspace(), "|", req.GetUsername(), "|", req.GetIncludeInactive())
	rows, next, err := list(ctx, s.h, req.GetWorkspace(), req, filters, 1, func(c Caller, after []string, limit int) ([]store.TokenInfo, []string, error) {
		who, err := tokenOwner(c, req.GetUsername())
		if err != nil {
			return nil, nil, err
		}
		return s.h.Store.ListTokens(ctx, req.GetWorkspace(), who, req.GetIncludeInactive(), after[0], limit)
	})
	if err != nil {
		return nil, err
	}
	return &policyv1.ListTokensResponse{Tokens: convert(rows, tokenToProto), NextPageToken: next}, nil
}
