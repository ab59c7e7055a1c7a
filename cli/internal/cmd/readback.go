package cmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// readBack is the `get` and `list` commands of one resource: what is particular to it is how
// to build its two requests; connecting, paging (--page-size, --page-token, --all), printing
// and errors are shared. A new Get/List pair of RPCs is one more value of this type.
type readBack[C any, T, G proto.Message] struct {
	noun    string // "member", for the help
	client  func(grpc.ClientConnInterface) C
	getArg  string // "USERNAME"
	get     func(ctx context.Context, c C, ws, id string) (G, error)
	list    func(ctx context.Context, c C, ws string, size int32, token string) ([]T, string, error)
	flags   func(get, list *pflag.FlagSet) // the resource's own flags (filters), if any
	global  bool                           // not in a workspace (workspaces themselves)
	columns []string                       // the list's columns (default: every field)
}

// commands returns `get ID` and `list`.
func (r readBack[C, T, G]) commands(a *app) (get, list *cobra.Command) {
	in := func(run func(cmd *cobra.Command, args []string, ws string) error) func(*cobra.Command, []string) error {
		if r.global {
			return func(cmd *cobra.Command, args []string) error { return run(cmd, args, "") }
		}
		return a.inWorkspace(run)
	}
	get = &cobra.Command{
		Use: "get " + r.getArg, Short: "One " + r.noun, Args: cobra.ExactArgs(1),
		RunE: in(func(cmd *cobra.Command, args []string, ws string) error {
			return call(a, cmd, policy, r.client, func(c C) (G, error) { return r.get(cmd.Context(), c, ws, args[0]) })
		}),
	}
	list = &cobra.Command{Use: "list", Short: "Every " + r.noun + ", page by page", Args: cobra.NoArgs}
	p := addPaging(list)
	list.RunE = in(func(cmd *cobra.Command, _ []string, ws string) error {
		conn, err := a.conn(cmd.Context(), policy)
		if err != nil {
			return err
		}
		c := r.client(conn)
		return listPages(a, p, func(size int32, token string) ([]T, string, error) {
			return r.list(cmd.Context(), c, ws, size, token)
		}, r.columns...)
	})
	if r.flags != nil {
		r.flags(get.Flags(), list.Flags())
	}
	return get, list
}

// group is a command group of a resource's get and list.
func group(use, short string, cmds ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, GroupID: "read"}
	c.AddCommand(cmds...)
	return c
}

// enumFlag parses a flag naming a value of an enum by its short name (script for
// RUNNABLE_KIND_SCRIPT); "" is the zero value.
func enumFlag(flag, prefix, v string, values map[string]int32) (int32, error) {
	if v == "" {
		return 0, nil
	}
	n, ok := values[prefix+strings.ToUpper(v)]
	if !ok {
		var names []string
		for name, n := range values {
			if n != 0 {
				names = append(names, strings.ToLower(strings.TrimPrefix(name, prefix)))
			}
		}
		return 0, fmt.Errorf("--%s %q: one of %s", flag, v, strings.Join(names, ", "))
	}
	return n, nil
}

type (
	wsc  = policyv1.WorkspaceServiceClient
	catc = policyv1.CatalogServiceClient
	runc = policyv1.RunServiceClient
	tokc = policyv1.TokenServiceClient
)

// readBackCmds are the read-back commands of policy's resources (issue 17).
func (a *app) readBackCmds() []*cobra.Command {
	workspaces := readBack[wsc, *policyv1.Workspace, *policyv1.GetWorkspaceResponse]{
		noun: "workspace", client: policyv1.NewWorkspaceServiceClient, getArg: "WORKSPACE", global: true,
		get: func(ctx context.Context, c wsc, _, id string) (*policyv1.GetWorkspaceResponse, error) {
			return c.GetWorkspace(ctx, &policyv1.GetWorkspaceRequest{Workspace: id})
		},
		list: func(ctx context.Context, c wsc, _ string, size int32, token string) ([]*policyv1.Workspace, string, error) {
			resp, err := c.ListWorkspaces(ctx, &policyv1.ListWorkspacesRequest{PageSize: size, PageToken: token})
			return resp.GetWorkspaces(), resp.GetNextPageToken(), err
		},
	}
	var role string
	var disabled bool
	members := readBack[wsc, *policyv1.Member, *policyv1.GetMemberResponse]{
		noun: "member of the workspace", client: policyv1.NewWorkspaceServiceClient, getArg: "USERNAME",
		get: func(ctx context.Context, c wsc, ws, id string) (*policyv1.GetMemberResponse, error) {
			return c.GetMember(ctx, &policyv1.GetMemberRequest{Workspace: ws, Username: id})
		},
		list: func(ctx context.Context, c wsc, ws string, size int32, token string) ([]*policyv1.Member, string, error) {
			r, err := enumFlag("role", "ROLE_", role, policyv1.Role_value)
			if err != nil {
				return nil, "", err
			}
			resp, err := c.ListMembers(ctx, &policyv1.ListMembersRequest{Workspace: ws, PageSize: size, PageToken: token,
				Role: policyv1.Role(r), IncludeDisabled: disabled})
			return resp.GetMembers(), resp.GetNextPageToken(), err
		},
		flags: func(_, l *pflag.FlagSet) {
			l.StringVar(&role, "role", "", "only members of this role (admin, developer, operator)")
			l.BoolVar(&disabled, "include-disabled", false, "disabled members too")
		},
	}
	var member string
	groups := readBack[wsc, *policyv1.Group, *policyv1.GetGroupResponse]{
		noun: "group of the workspace", client: policyv1.NewWorkspaceServiceClient, getArg: "NAME",
		get: func(ctx context.Context, c wsc, ws, id string) (*policyv1.GetGroupResponse, error) {
			return c.GetGroup(ctx, &policyv1.GetGroupRequest{Workspace: ws, Name: id})
		},
		list: func(ctx context.Context, c wsc, ws string, size int32, token string) ([]*policyv1.Group, string, error) {
			resp, err := c.ListGroups(ctx, &policyv1.ListGroupsRequest{Workspace: ws, PageSize: size, PageToken: token, Member: member})
			return resp.GetGroups(), resp.GetNextPageToken(), err
		},
		flags: func(_, l *pflag.FlagSet) { l.StringVar(&member, "member", "", "only groups this user is in") },
	}
	folders := readBack[wsc, *policyv1.Folder, *policyv1.GetFolderResponse]{
		noun: "folder of the workspace", client: policyv1.NewWorkspaceServiceClient, getArg: "NAME",
		get: func(ctx context.Context, c wsc, ws, id string) (*policyv1.GetFolderResponse, error) {
			return c.GetFolder(ctx, &policyv1.GetFolderRequest{Workspace: ws, Name: id})
		},
		list: func(ctx context.Context, c wsc, ws string, size int32, token string) ([]*policyv1.Folder, string, error) {
			resp, err := c.ListFolders(ctx, &policyv1.ListFoldersRequest{Workspace: ws, PageSize: size, PageToken: token})
			return resp.GetFolders(), resp.GetNextPageToken(), err
		},
	}
	var getKind, kind, prefix string
	runnables := readBack[catc, *policyv1.Runnable, *policyv1.GetRunnableResponse]{
		noun: "script, flow or app of the catalog", client: policyv1.NewCatalogServiceClient, getArg: "PATH",
		get: func(ctx context.Context, c catc, ws, id string) (*policyv1.GetRunnableResponse, error) {
			k, err := enumFlag("kind", "RUNNABLE_KIND_", getKind, policyv1.RunnableKind_value)
			if err != nil {
				return nil, err
			}
			return c.GetRunnable(ctx, &policyv1.GetRunnableRequest{Workspace: ws, Kind: policyv1.RunnableKind(k), Path: id})
		},
		list: func(ctx context.Context, c catc, ws string, size int32, token string) ([]*policyv1.Runnable, string, error) {
			k, err := enumFlag("kind", "RUNNABLE_KIND_", kind, policyv1.RunnableKind_value)
			if err != nil {
				return nil, "", err
			}
			resp, err := c.ListRunnables(ctx, &policyv1.ListRunnablesRequest{Workspace: ws, PageSize: size, PageToken: token,
				Kind: policyv1.RunnableKind(k), PathPrefix: prefix})
			return resp.GetRunnables(), resp.GetNextPageToken(), err
		},
		flags: func(g, l *pflag.FlagSet) {
			g.StringVar(&getKind, "kind", "script", "script, flow or app")
			l.StringVar(&kind, "kind", "", "only scripts, flows or apps")
			l.StringVar(&prefix, "path-prefix", "", "only paths that start with this (f/sales/)")
		},
	}
	var as string
	var running bool
	runs := readBack[runc, *policyv1.GetRunResponse, *policyv1.GetRunResponse]{
		noun: "run", client: policyv1.NewRunServiceClient, getArg: "JOB_ID",
		get: func(ctx context.Context, c runc, ws, id string) (*policyv1.GetRunResponse, error) {
			return c.GetRun(ctx, &policyv1.GetRunRequest{Workspace: ws, JobId: id})
		},
		list: func(ctx context.Context, c runc, ws string, size int32, token string) ([]*policyv1.GetRunResponse, string, error) {
			resp, err := c.ListRuns(ctx, &policyv1.ListRunsRequest{Workspace: ws, PageSize: size, PageToken: token,
				PermissionedAs: as, RunningOnly: running})
			return resp.GetRuns(), resp.GetNextPageToken(), err
		},
		flags: func(_, l *pflag.FlagSet) {
			l.StringVar(&as, "permissioned-as", "", "only runs permissioned as this owner (u/<user>)")
			l.BoolVar(&running, "running", false, "only runs not finished")
		},
		columns: []string{"run.job_id", "run.permissioned_as", "run.origin", "run.viewer_email", "run.created_at", "finish_time"},
	}
	var out []*cobra.Command
	add := func(use, short string, get, list *cobra.Command) {
		out = append(out, group(use, short, get, list))
	}
	g, l := workspaces.commands(a)
	add("workspaces", "Workspaces (superadmin)", g, l)
	g, l = members.commands(a)
	add("members", "A workspace's members", g, l)
	g, l = groups.commands(a)
	add("groups", "A workspace's groups", g, l)
	g, l = folders.commands(a)
	add("folders", "A workspace's folders", g, l)
	g, l = runnables.commands(a)
	add("runnables", "A workspace's catalog: scripts, flows, apps", g, l)
	g, l = runs.commands(a)
	add("runs", "A workspace's runs", g, l)
	return out
}

// tokenReadBack is `tokens get` and `tokens list`: token metadata, never a token.
func (a *app) tokenReadBack() (get, list *cobra.Command) {
	var username string
	var inactive bool
	return readBack[tokc, *policyv1.TokenInfo, *policyv1.GetTokenResponse]{
		noun: "token's metadata", client: policyv1.NewTokenServiceClient, getArg: "TOKEN_ID",
		get: func(ctx context.Context, c tokc, ws, id string) (*policyv1.GetTokenResponse, error) {
			return c.GetToken(ctx, &policyv1.GetTokenRequest{Workspace: ws, TokenId: id})
		},
		list: func(ctx context.Context, c tokc, ws string, size int32, token string) ([]*policyv1.TokenInfo, string, error) {
			resp, err := c.ListTokens(ctx, &policyv1.ListTokensRequest{Workspace: ws, PageSize: size, PageToken: token,
				Username: username, IncludeInactive: inactive})
			return resp.GetTokens(), resp.GetNextPageToken(), err
		},
		flags: func(_, l *pflag.FlagSet) {
			l.StringVar(&username, "username", "", "only this user's tokens")
			l.BoolVar(&inactive, "include-inactive", false, "revoked and expired tokens too")
		},
	}.commands(a)
}
