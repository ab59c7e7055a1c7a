package cmd

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/millwright/millwright/cli/internal/output"
	"github.com/millwright/millwright/pkg/apidesc"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// rpc is a unary method of a generated client, as a method expression:
// (policyv1.WorkspaceServiceClient).ListMembers.
type rpc[C any, Req, Resp proto.Message] func(C, context.Context, Req, ...grpc.CallOption) (Resp, error)

// Get and List RPCs follow AIP-131/132 closely enough that one command serves each kind:
// the request's workspace comes from the context, its id from the argument, page_size and
// page_token from the paging flags, and every other field of the request becomes a flag of
// the same name (a List's filters, a Get's selector), so a new Get/List pair of RPCs is one
// line in readBackCmds and its filters need no code.

// getCommand is `get ID` for a Get RPC whose request names the resource by idField.
func getCommand[C any, Req, Resp proto.Message](a *app, noun, svc string, client func(grpc.ClientConnInterface) C, get rpc[C, Req, Resp], idField string) *cobra.Command {
	md := newMessage[Req]().ProtoReflect().Descriptor()
	c := &cobra.Command{Use: "get " + strings.ToUpper(idField), Short: "One " + noun, Args: cobra.ExactArgs(1)}
	fill := requestFlags(c.Flags(), md, "workspace", idField)
	needWorkspace := md.Fields().ByName("workspace") != nil && idField != "workspace"
	c.RunE = func(cmd *cobra.Command, args []string) error {
		req := newMessage[Req]()
		m := req.ProtoReflect()
		if err := a.setWorkspace(m, needWorkspace); err != nil {
			return err
		}
		m.Set(md.Fields().ByName(protoreflect.Name(idField)), protoreflect.ValueOfString(args[0]))
		if err := fill(m); err != nil {
			return err
		}
		return call(a, cmd, svc, client, func(c C) (Resp, error) { return get(c, cmd.Context(), req) })
	}
	return c
}

// listCommand is `list` for a paged List RPC of svc; svc "" means the command's first
// argument names the service (every service serves AuditService). The response's one
// repeated message field is the page. workspaceFilter says the request's workspace is a
// filter (only --workspace sets it), not the context's workspace the call is about.
func listCommand[C any, Req, Resp proto.Message](a *app, noun, svc string, client func(grpc.ClientConnInterface) C, list rpc[C, Req, Resp], workspaceFilter bool, columns ...string) *cobra.Command {
	md := newMessage[Req]().ProtoReflect().Descriptor()
	c := &cobra.Command{Use: "list", Short: "Every " + noun + ", page by page", Args: cobra.NoArgs}
	if svc == "" {
		c.Use, c.Args, c.ValidArgs = "list policy|roleset|billing", cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs), services
	}
	p := addPaging(c)
	fill := requestFlags(c.Flags(), md, "workspace", "page_size", "page_token", "service")
	needWorkspace := md.Fields().ByName("workspace") != nil && !workspaceFilter
	c.RunE = func(cmd *cobra.Command, args []string) error {
		to := svc
		if to == "" {
			to = args[0]
		}
		req := newMessage[Req]()
		m := req.ProtoReflect()
		if err := a.setWorkspace(m, needWorkspace); err != nil {
			return err
		}
		if fd := md.Fields().ByName("workspace"); fd != nil && workspaceFilter {
			m.Set(fd, protoreflect.ValueOfString(a.flags.Workspace))
		}
		if err := fill(m); err != nil {
			return err
		}
		conn, err := a.conn(cmd.Context(), to)
		if err != nil {
			return err
		}
		cl := client(conn)
		token := p.token
		for head := true; ; head = false {
			m.Set(md.Fields().ByName("page_size"), protoreflect.ValueOfInt32(p.size))
			m.Set(md.Fields().ByName("page_token"), protoreflect.ValueOfString(token))
			resp, err := list(cl, cmd.Context(), req)
			if err != nil {
				return err
			}
			md, items, next := page(resp.ProtoReflect())
			if err := output.Page(a.out, md, items, head, columns...); err != nil {
				return err
			}
			if next == "" {
				return nil
			}
			if !p.all {
				fmt.Fprintf(a.Stderr, "more: --page-token %s (or --all)\n", next)
				return nil
			}
			token = next
		}
	}
	return c
}

// page splits a List response into its items, their type (a list of strings, a script's
// version hashes, as one-column rows) and next_page_token.
func page(m protoreflect.Message) (protoreflect.MessageDescriptor, []proto.Message, string) {
	var items []proto.Message
	md := (&wrapperspb.StringValue{}).ProtoReflect().Descriptor()
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if !fd.IsList() {
			continue
		}
		if fd.Message() != nil {
			md = fd.Message()
		}
		l := m.Get(fd).List()
		for j := range l.Len() {
			if fd.Message() != nil {
				items = append(items, l.Get(j).Message().Interface())
			} else {
				items = append(items, wrapperspb.String(l.Get(j).String()))
			}
		}
	}
	return md, items, m.Get(fds.ByName("next_page_token")).String()
}

// newMessage is a new, empty Req (a pointer to a generated message).
func newMessage[Req proto.Message]() Req {
	var zero Req
	return zero.ProtoReflect().New().Interface().(Req) //nolint:forcetypeassert // New of Req's own type
}

// setWorkspace sets a request's workspace to the resolved one, when the call is about one.
func (a *app) setWorkspace(m protoreflect.Message, need bool) error {
	if !need {
		return nil
	}
	ws, err := a.workspace()
	if err != nil {
		return err
	}
	m.Set(m.Descriptor().Fields().ByName("workspace"), protoreflect.ValueOfString(ws))
	return nil
}

// requestFlags adds a flag for each field of md not in skip (snake_case becomes kebab-case)
// whose kind a flag can carry: strings, booleans, integers, enums (by their short name, e.g.
// --role operator for ROLE_OPERATOR), repeated strings and timestamps (RFC 3339 or a duration
// ago). The returned fill sets, on a request, the fields whose flags were given.
func requestFlags(fs *pflag.FlagSet, md protoreflect.MessageDescriptor, skip ...string) func(protoreflect.Message) error {
	var setters []func(protoreflect.Message) error
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		if slices.Contains(skip, name) || fd.IsMap() {
			continue
		}
		flag := strings.ReplaceAll(name, "_", "-")
		given := func() bool { return fs.Changed(flag) }
		help := fieldHelp(fd)
		var set func(m protoreflect.Message) error
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			v := fs.StringSlice(flag, nil, help+" (repeatable)")
			set = func(m protoreflect.Message) error {
				l := m.Mutable(fd).List()
				for _, s := range *v {
					l.Append(protoreflect.ValueOfString(s))
				}
				return nil
			}
		case fd.IsList():
			continue
		case fd.Kind() == protoreflect.StringKind:
			v := fs.String(flag, "", help)
			set = func(m protoreflect.Message) error { m.Set(fd, protoreflect.ValueOfString(*v)); return nil }
		case fd.Kind() == protoreflect.BoolKind:
			v := fs.Bool(flag, false, help)
			set = func(m protoreflect.Message) error { m.Set(fd, protoreflect.ValueOfBool(*v)); return nil }
		case fd.Kind() == protoreflect.Int32Kind:
			v := fs.Int32(flag, 0, help)
			set = func(m protoreflect.Message) error { m.Set(fd, protoreflect.ValueOfInt32(*v)); return nil }
		case fd.Kind() == protoreflect.Int64Kind:
			v := fs.Int64(flag, 0, help)
			set = func(m protoreflect.Message) error { m.Set(fd, protoreflect.ValueOfInt64(*v)); return nil }
		case fd.Kind() == protoreflect.EnumKind:
			prefix, names := enumNames(fd.Enum())
			v := fs.String(flag, "", help+": "+strings.Join(names, ", "))
			set = func(m protoreflect.Message) error {
				ev := fd.Enum().Values().ByName(protoreflect.Name(prefix + strings.ToUpper(*v)))
				if ev == nil {
					return fmt.Errorf("--%s %q: one of %s", flag, *v, strings.Join(names, ", "))
				}
				m.Set(fd, protoreflect.ValueOfEnum(ev.Number()))
				return nil
			}
		case fd.Message() != nil && fd.Message().FullName() == (&timestamppb.Timestamp{}).ProtoReflect().Descriptor().FullName():
			v := fs.String(flag, "", help+" (RFC 3339, or a duration ago: 1h)")
			set = func(m protoreflect.Message) error {
				ts, err := when("--"+flag, *v)
				if err == nil {
					m.Set(fd, protoreflect.ValueOfMessage(ts.ProtoReflect()))
				}
				return err
			}
		default:
			continue
		}
		setters = append(setters, func(m protoreflect.Message) error {
			if !given() {
				return nil
			}
			return set(m)
		})
	}
	return func(m protoreflect.Message) error {
		for _, set := range setters {
			if err := set(m); err != nil {
				return err
			}
		}
		return nil
	}
}

// fieldHelp is a field's help: the first sentence of its proto comment (the documented
// descriptors of pkg/apidesc, what grpcurl describe shows), else its name in words.
func fieldHelp(fd protoreflect.FieldDescriptor) string {
	words := strings.ReplaceAll(string(fd.Name()), "_", " ")
	files, err := apidesc.Files()
	if err != nil {
		return words
	}
	d, err := files.FindDescriptorByName(fd.FullName())
	if err != nil {
		return words
	}
	doc := strings.Join(strings.Fields(d.ParentFile().SourceLocations().ByDescriptor(d).LeadingComments), " ")
	if loc := sentenceEnd.FindStringIndex(doc); loc != nil {
		doc = doc[:loc[0]]
	}
	doc = strings.TrimSuffix(doc, ".")
	if doc == "" {
		return words
	}
	return doc
}

// sentenceEnd is a full stop followed by a new sentence (not the one of "e.g. ").
var sentenceEnd = regexp.MustCompile(`\.\s+[A-Z]`)

// enumNames are an enum's values by short name (ROLE_OPERATOR is "operator"), without the
// unspecified one, and the prefix that makes them whole again.
func enumNames(ed protoreflect.EnumDescriptor) (prefix string, names []string) {
	vals := ed.Values()
	prefix = strings.TrimSuffix(string(vals.ByNumber(0).Name()), "UNSPECIFIED")
	for i := range vals.Len() {
		if v := vals.Get(i); v.Number() != 0 {
			names = append(names, strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix)))
		}
	}
	return prefix, names
}

type (
	wsc  = policyv1.WorkspaceServiceClient
	catc = policyv1.CatalogServiceClient
	runc = policyv1.RunServiceClient
)

// readBackCmds are the read-back commands of policy's resources (issue 17): one line a
// resource (its Get, the field that names it, its List, the list's columns if not all).
func (a *app) readBackCmds() []*cobra.Command {
	ws, cat, run := policyv1.NewWorkspaceServiceClient, policyv1.NewCatalogServiceClient, policyv1.NewRunServiceClient
	runnables := resource(a, "runnables", "script, flow or app (get needs --kind)", cat, catc.GetRunnable, "path", catc.ListRunnables)
	runnables.AddCommand(withUse(listCommand(a, "version of a script (--path)", policy, cat, catc.ListScriptVersions, false), "versions"))
	return []*cobra.Command{
		resource(a, "workspaces", "workspace (superadmin)", ws, wsc.GetWorkspace, "workspace", wsc.ListWorkspaces),
		resource(a, "members", "member of the workspace", ws, wsc.GetMember, "username", wsc.ListMembers),
		resource(a, "groups", "group of the workspace", ws, wsc.GetGroup, "name", wsc.ListGroups),
		resource(a, "folders", "folder of the workspace", ws, wsc.GetFolder, "name", wsc.ListFolders),
		runnables,
		resource(a, "runs", "run of the workspace", run, runc.GetRun, "job_id", runc.ListRuns,
			"run.job_id", "run.permissioned_as", "run.origin", "run.viewer_email", "run.created_at", "finish_time"),
	}
}

// resource is the command group of one policy resource: `get` and `list`.
func resource[C any, GReq, GResp, LReq, LResp proto.Message](a *app, use, noun string, client func(grpc.ClientConnInterface) C,
	get rpc[C, GReq, GResp], idField string, list rpc[C, LReq, LResp], columns ...string,
) *cobra.Command {
	return group(use, "Get and list each "+noun, getCommand(a, noun, policy, client, get, idField),
		listCommand(a, noun, policy, client, list, false, columns...))
}

// tokenReadBack is `tokens get` and `tokens list`: token metadata, never a token.
func (a *app) tokenReadBack() []*cobra.Command {
	return []*cobra.Command{
		getCommand(a, "token's metadata", policy, policyv1.NewTokenServiceClient, policyv1.TokenServiceClient.GetToken, "token_id"),
		listCommand(a, "token's metadata", policy, policyv1.NewTokenServiceClient, policyv1.TokenServiceClient.ListTokens, false),
	}
}

// usageReports is `seats reports`: billing's daily usage reports.
func (a *app) usageReports() *cobra.Command {
	return withUse(listCommand(a, "daily usage report, newest first", billing, billingv1.NewBillingServiceClient,
		billingv1.BillingServiceClient.ListUsageReports, false), "reports")
}

// group is a command group of a resource's get and list.
func group(use, short string, cmds ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, GroupID: "read"}
	c.AddCommand(cmds...)
	return c
}

// withUse renames a command (a second list of a resource, `runnables versions`).
func withUse(c *cobra.Command, use string) *cobra.Command {
	c.Use = use + strings.TrimPrefix(c.Use, "list")
	return c
}
