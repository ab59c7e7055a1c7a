package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/auth"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// ViewerRole is the agent worker's role value meaning "the viewer's roles" (the field form of
// datatable://<name>?as=viewer).
const ViewerRole = "$viewer"

// redacted replaces the password wherever a Connection is shown.
const redacted = "[REDACTED]"

// Connection is the login roleset hands out for one job and one data table. Password is the
// one secret: every way of printing, logging or marshalling a Connection leaves it out; use
// DSN (or the fields) to open the connection.
type Connection struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Database string `json:"database"`
	User     string `json:"user"`
	Password string `json:"-"`
	// Roles are the names of the roles the login holds ("admin" for the admin connection).
	Roles []string `json:"roles"`
	// Kind says whether this is the admin login, one role's login or a role-set login.
	Kind rolesetv1.ConnectionKind `json:"kind"`
}

// DSN returns the libpq URL postgres://user:password@host:port/database, every part escaped
// (a password may hold any character). It contains the password: never log it.
func (c Connection) DSN() string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.UserPassword(c.User, c.Password),
		Host:   net.JoinHostPort(c.Host, strconv.Itoa(c.Port)),
		Path:   "/" + c.Database,
	}
	return u.String()
}

// String describes the connection without its password.
func (c Connection) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "postgres://%s:%s@%s/%s", url.PathEscape(c.User), redacted,
		net.JoinHostPort(c.Host, strconv.Itoa(c.Port)), url.PathEscape(c.Database))
	fmt.Fprintf(&b, " roles=%v kind=%s", c.Roles, c.Kind)
	return b.String()
}

// GoString is %#v: the fields, the password redacted.
func (c Connection) GoString() string {
	return fmt.Sprintf("client.Connection{Host:%q, Port:%d, Database:%q, User:%q, Password:%q, Roles:%#v, Kind:%s}",
		c.Host, c.Port, c.Database, c.User, redacted, c.Roles, c.Kind)
}

// Format makes every fmt verb (%v, %+v, %#v, %s, %q, %x, %d, ...) print the redacted form:
// without it, verbs that bypass String (%d, %x on a struct) would print the password.
func (c Connection) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = io.WriteString(f, c.GoString())
	case verb == 'q':
		_, _ = io.WriteString(f, strconv.Quote(c.String()))
	default:
		_, _ = io.WriteString(f, c.String())
	}
}

// LogValue implements slog.LogValuer: the connection's fields, the password redacted.
func (c Connection) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("host", c.Host),
		slog.Int("port", c.Port),
		slog.String("database", c.Database),
		slog.String("user", c.User),
		slog.String("password", redacted),
		slog.Any("roles", c.Roles),
		slog.String("kind", c.Kind.String()),
	)
}

// ResolveConnection asks roleset which login the job holding jobToken connects to a data
// table as. reference is datatable://<name>, datatable://<name>?role=<r> or
// datatable://<name>?as=viewer. The job token is the call's bearer (roleset derives the run,
// its owner and its recorded viewer from it). Refusals (PermissionDenied NO_ROLE / NO_VIEWER /
// ROLE_DISABLED, InvalidArgument MALFORMED_REFERENCE, ...) are returned at once; see Reason.
func (c *Client) ResolveConnection(ctx context.Context, jobToken, reference string) (*Connection, error) {
	return c.resolve(ctx, jobToken, &rolesetv1.ResolveConnectionRequest{Reference: reference})
}

// ResolveAgent is ResolveConnection for agent workers, which name the data table and the
// role as fields: role is a role name, "admin", or ViewerRole for the viewer's roles.
func (c *Client) ResolveAgent(ctx context.Context, jobToken, datatable, role string) (*Connection, error) {
	return c.resolve(ctx, jobToken, &rolesetv1.ResolveConnectionRequest{Datatable: datatable, Role: role})
}

// ExplainConnection returns the decision ResolveConnection would make for reference, with
// its tenancy trace and no credential (for a worker's diagnostics).
func (c *Client) ExplainConnection(ctx context.Context, jobToken, reference string) (*rolesetv1.ExplainConnectionResponse, error) {
	creds, err := c.jobCreds(jobToken)
	if err != nil {
		return nil, err
	}
	req := &rolesetv1.ExplainConnectionRequest{Reference: reference}
	return call(ctx, c.retry, "explain connection", func(ctx context.Context) (*rolesetv1.ExplainConnectionResponse, error) {
		return c.roleset.ExplainConnection(ctx, req, creds)
	})
}

func (c *Client) resolve(ctx context.Context, jobToken string, req *rolesetv1.ResolveConnectionRequest) (*Connection, error) {
	creds, err := c.jobCreds(jobToken)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c.retry, "resolve connection", func(ctx context.Context) (*rolesetv1.ResolveConnectionResponse, error) {
		return c.roleset.ResolveConnection(ctx, req, creds)
	})
	if err != nil {
		return nil, err
	}
	return &Connection{
		Host:     resp.GetHost(),
		Port:     int(resp.GetPort()),
		Database: resp.GetDatabase(),
		User:     resp.GetUser(),
		Password: resp.GetPassword(),
		Roles:    resp.GetRoles(),
		Kind:     resp.GetKind(),
	}, nil
}

// jobCreds returns the call option that makes jobToken the bearer of one roleset call.
func (c *Client) jobCreds(jobToken string) (grpc.CallOption, error) {
	if c.roleset == nil {
		return nil, errors.New("client: roleset is not configured (RolesetAddr or RolesetConn)")
	}
	if jobToken == "" {
		return nil, errors.New("client: the job token is required: roleset authenticates the run with it")
	}
	return grpc.PerRPCCredentials(auth.PerRPC(jobToken)), nil
}
