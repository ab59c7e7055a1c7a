package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/server"
)

type config struct {
	adminToken, serviceToken       string
	policy, roleset, billing, http string
	runDir                         string
	target                         target
	wait                           time.Duration
}

// target is the demo target database, reached as the cluster admin roleset manages roles with.
type target struct {
	host     string
	port     int32
	database string
	user     string
	password string
}

func parseTarget(raw string) (target, error) {
	if raw == "" {
		return target{}, errors.New("MILLWRIGHT_DEMO_TARGET_URL is required (scripts/run.sh sets it)")
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return target{}, errors.New("MILLWRIGHT_DEMO_TARGET_URL: want postgres://user:password@host:port/db")
	}
	pw, _ := u.User.Password()
	ps := u.Port()
	if ps == "" {
		ps = "5432"
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port <= 0 || port > 65535 {
		return target{}, fmt.Errorf("MILLWRIGHT_DEMO_TARGET_URL: bad port %q", u.Port())
	}
	t := target{host: u.Hostname(), port: int32(port), database: strings.TrimPrefix(u.Path, "/"),
		user: u.User.Username(), password: pw}
	if t.host == "" || t.database == "" || t.user == "" || t.password == "" {
		return target{}, errors.New("MILLWRIGHT_DEMO_TARGET_URL: want postgres://user:password@host:port/db")
	}
	return t, nil
}

// The demo, as data. README.md's walkthrough and gateway/e2e/readme_test.go rely on these names.
const (
	workspace = "demo"
	cluster   = "local"
	datatable = "main"
)

type member struct {
	username, email string
	role            policyv1.Role
}

var members = []member{
	{"ada", "ada@example.com", policyv1.Role_ROLE_ADMIN},
	{"devon", "devon@example.com", policyv1.Role_ROLE_DEVELOPER},
	{"alice", "alice@example.com", policyv1.Role_ROLE_OPERATOR},
	{"bob", "bob@example.com", policyv1.Role_ROLE_OPERATOR},
}

var groups = map[string][]string{
	"emea":     {"alice"},
	"apac":     {"bob"},
	"analysts": {"devon"},
}

var folders = []*policyv1.UpsertFolderRequest{
	// Both operators read (and so may compose) what is in f/sales; devon writes it.
	{Workspace: workspace, Name: "sales", Owners: []string{"g/analysts"},
		Readers: []string{"g/emea", "g/apac"}, Writers: []string{"u/devon"}},
	// Only admins and devon see f/finance: an operator composing it is refused.
	{Workspace: workspace, Name: "finance", Owners: []string{"u/devon"}},
}

var scripts = []*policyv1.RegisterScriptRequest{
	{Workspace: workspace, Path: "f/sales/fetch_orders", VersionHashes: []string{"a1b2c3d4e5f60718", "a1b2c3d4e5f60719"},
		LatestHash: "a1b2c3d4e5f60719", OnBehalfOf: "u/devon"},
	{Workspace: workspace, Path: "f/sales/summarize", VersionHashes: []string{"b1b2c3d4e5f60718"},
		LatestHash: "b1b2c3d4e5f60718", OnBehalfOf: "u/devon"},
	{Workspace: workspace, Path: "f/finance/payroll", VersionHashes: []string{"c1b2c3d4e5f60718"},
		LatestHash: "c1b2c3d4e5f60718", OnBehalfOf: "u/devon"},
	{Workspace: workspace, Path: "u/devon/scratch", VersionHashes: []string{"d1b2c3d4e5f60718"},
		LatestHash: "d1b2c3d4e5f60718"},
}

var flows = []*policyv1.RegisterFlowRequest{
	{Workspace: workspace, Path: "f/sales/daily_report", OnBehalfOf: "u/devon"},
}

var tags = []*policyv1.WorkerTag{{Name: "default"}, {Name: "reports"}, {Name: "gpu", Privileged: true}}

// The roles of the data table and who is a tenant of each (by role name; ids are looked up).
var roles = []string{"sales_emea", "sales_apac", "sales_all"}

var tenants = map[string][]string{
	"sales_emea": {"g/emea"},
	"sales_apac": {"g/apac"},
	"sales_all":  {"g/analysts"},
	"admin":      {"u/ada"},
}

// viewers get a job token each: a direct run they started, so the run's recorded viewer is them.
var viewers = []string{"alice", "bob"}

type loader struct {
	c             config
	pol, rs, bill *grpc.ClientConn
	svc           *grpc.ClientConn // policy, as the service token (Authenticate, RecordRun)
	created       []string         // token files written by this run
	reused        []string
}

func run(ctx context.Context, c config) error {
	if err := os.MkdirAll(c.runDir, 0o755); err != nil {
		return err
	}
	l := &loader{c: c}
	var err error
	for _, d := range []struct {
		cc         **grpc.ClientConn
		addr, tokn string
	}{{&l.pol, c.policy, c.adminToken}, {&l.rs, c.roleset, c.adminToken}, {&l.bill, c.billing, c.adminToken},
		{&l.svc, c.policy, c.serviceToken}} {
		if *d.cc, err = server.Dial(ctx, d.addr, d.tokn); err != nil {
			return err
		}
		defer (*d.cc).Close()
	}
	if err := l.waitHealthy(ctx); err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"workspace", l.workspace},
		{"catalog", l.catalog},
		{"tokens", l.tokens},
		{"data table", l.datatable},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("demo: %s: %w", s.name, err)
		}
	}
	pos, err := l.builderOff(ctx)
	if err != nil {
		return fmt.Errorf("demo: operator settings: %w", err)
	}
	return l.summary(ctx, pos)
}

func (l *loader) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.c.wait)
	defer cancel()
	for {
		ok, last := true, ""
		for name, cc := range map[string]*grpc.ClientConn{"policy": l.pol, "roleset": l.rs, "billing": l.bill} {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			h, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
			ccancel()
			if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				ok = false
				last = fmt.Sprintf("%s: %v %v", name, h.GetStatus(), err)
				break
			}
		}
		if ok && !l.gatewayHealthy(ctx) {
			ok, last = false, "the gateway's /healthz"
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			// Say which part was not healthy at the last look, so a failed start can be read.
			return fmt.Errorf("demo: the stack is not healthy after %s (last: %s)", l.c.wait, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (l *loader) gatewayHealthy(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.c.http+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// exists treats AlreadyExists as done: the demo is loaded again on every `make run`.
func exists(err error) error {
	if status.Code(err) == codes.AlreadyExists {
		return nil
	}
	return err
}

func (l *loader) workspace(ctx context.Context) error {
	ws := policyv1.NewWorkspaceServiceClient(l.pol)
	_, err := ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: workspace, Name: "Demo",
		AdminEmail: members[0].email, AdminUsername: members[0].username})
	if err := exists(err); err != nil {
		return err
	}
	for _, m := range members {
		if _, err := ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: workspace,
			Username: m.username, Email: m.email, Role: m.role}); err != nil {
			return fmt.Errorf("member %s: %w", m.username, err)
		}
	}
	for _, name := range []string{"emea", "apac", "analysts"} {
		if _, err := ws.UpsertGroup(ctx, &policyv1.UpsertGroupRequest{Workspace: workspace, Name: name,
			Members: groups[name]}); err != nil {
			return fmt.Errorf("group %s: %w", name, err)
		}
	}
	for _, f := range folders {
		if _, err := ws.UpsertFolder(ctx, f); err != nil {
			return fmt.Errorf("folder %s: %w", f.GetName(), err)
		}
	}
	_, err = policyv1.NewTagServiceClient(l.pol).SetWorkerTags(ctx, &policyv1.SetWorkerTagsRequest{Workspace: workspace, Tags: tags})
	return err
}

func (l *loader) catalog(ctx context.Context) error {
	cat := policyv1.NewCatalogServiceClient(l.pol)
	for _, s := range scripts {
		if _, err := cat.RegisterScript(ctx, s); err != nil {
			return fmt.Errorf("script %s: %w", s.GetPath(), err)
		}
	}
	for _, f := range flows {
		if _, err := cat.RegisterFlow(ctx, f); err != nil {
			return fmt.Errorf("flow %s: %w", f.GetPath(), err)
		}
	}
	return nil
}

// tokens gives every member a user token and every viewer a job token of a run they started,
// reusing the ones in the run directory that still authenticate as what they were made for.
func (l *loader) tokens(ctx context.Context) error {
	tok := policyv1.NewTokenServiceClient(l.pol)
	authn := policyv1.NewTokenServiceClient(l.svc)
	user := map[string]string{}
	for _, m := range members {
		name := m.username + "-token"
		if t, ok := l.reuse(ctx, authn, name, func(a *policyv1.AuthenticateResponse) bool {
			return a.GetKind() == policyv1.TokenKind_TOKEN_KIND_USER && a.GetWorkspace() == workspace &&
				a.GetUsername() == m.username && a.GetExpiresAt().AsTime().After(time.Now().Add(24*time.Hour))
		}); ok {
			user[m.username] = t
			continue
		}
		resp, err := tok.CreateToken(ctx, &policyv1.CreateTokenRequest{Workspace: workspace, Username: m.username,
			Label: "demo", ExpiresAt: timestamppb.New(time.Now().Add(90 * 24 * time.Hour))})
		if err != nil {
			return fmt.Errorf("user token of %s: %w", m.username, err)
		}
		if err := l.write(name, resp.GetToken()); err != nil {
			return err
		}
		user[m.username] = resp.GetToken()
	}
	runs := policyv1.NewRunServiceClient(l.svc)
	for _, v := range viewers {
		name := "job-" + v
		if _, ok := l.reuse(ctx, authn, name, func(a *policyv1.AuthenticateResponse) bool {
			// A job token outlives nothing it was not made for: it must still be the token of
			// a run in the demo workspace whose viewer is v.
			if a.GetKind() != policyv1.TokenKind_TOKEN_KIND_JOB || a.GetWorkspace() != workspace {
				return false
			}
			id, err := runs.GetRunIdentity(ctx, &policyv1.GetRunIdentityRequest{JobToken: l.read(name)})
			return err == nil && id.GetRun().GetHasViewer() && id.GetRun().GetViewerEmail() == v+"@example.com"
		}); ok {
			continue
		}
		resp, err := runs.RecordRun(ctx, &policyv1.RecordRunRequest{Workspace: workspace, JobId: newUUID(),
			PermissionedAs: "u/" + v, Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: user[v]})
		if err != nil {
			return fmt.Errorf("run of %s: %w", v, err)
		}
		if err := l.write(name, resp.GetJobToken()); err != nil {
			return err
		}
	}
	return nil
}

func (l *loader) path(name string) string { return filepath.Join(l.c.runDir, name) }

func (l *loader) read(name string) string {
	b, err := os.ReadFile(l.path(name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// reuse returns the token kept in the run directory under name if it authenticates and ok
// accepts what it authenticates as.
func (l *loader) reuse(ctx context.Context, authn policyv1.TokenServiceClient, name string,
	ok func(*policyv1.AuthenticateResponse) bool) (string, bool) {
	t := l.read(name)
	if t == "" {
		return "", false
	}
	a, err := authn.Authenticate(ctx, &policyv1.AuthenticateRequest{Token: t})
	if err != nil || !ok(a) {
		return "", false
	}
	l.reused = append(l.reused, name)
	return t, true
}

// write stores a token in its own file, readable by its owner only.
func (l *loader) write(name, secret string) error {
	p := l.path(name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	l.created = append(l.created, name)
	return nil
}

func (l *loader) datatable(ctx context.Context) error {
	t := l.c.target
	if _, err := rolesetv1.NewClusterServiceClient(l.rs).UpsertCluster(ctx, &rolesetv1.UpsertClusterRequest{
		ClusterId: cluster, Host: t.host, Port: t.port, MaintenanceDatabase: t.database,
		AdminUser: t.user, AdminPassword: t.password}); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	rc := rolesetv1.NewRoleServiceClient(l.rs)
	for _, r := range roles {
		_, err := rc.CreateRole(ctx, &rolesetv1.CreateRoleRequest{ClusterId: cluster, Name: r})
		if err := exists(err); err != nil {
			return fmt.Errorf("role %s: %w", r, err)
		}
	}
	list, err := rc.ListRoles(ctx, &rolesetv1.ListRolesRequest{ClusterId: cluster})
	if err != nil {
		return err
	}
	ids := map[string]string{"admin": "admin"}
	for _, r := range list.GetRoles() {
		ids[r.GetName()] = r.GetRoleId()
		if !r.GetEnabled() {
			// The demo's roles are enabled: someone disabled one while trying things out.
			if _, err := rc.UpdateRole(ctx, &rolesetv1.UpdateRoleRequest{RoleId: r.GetRoleId(), Enabled: ptr(true)}); err != nil {
				return fmt.Errorf("enable role %s: %w", r.GetName(), err)
			}
		}
	}
	dt := rolesetv1.NewDatatableServiceClient(l.rs)
	if _, err := dt.UpsertDatatable(ctx, &rolesetv1.UpsertDatatableRequest{Workspace: workspace, Name: datatable,
		ClusterId: cluster, Database: t.database, AdminUser: t.user, AdminPassword: t.password,
		DefaultRole: "$none", ViewerAccess: proto.Bool(true), CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY}); err != nil {
		return fmt.Errorf("data table: %w", err)
	}
	// A second data table on the same database that has not opted in to ?as=viewer (its
	// policies were not written per viewer): a job that asks for its viewer there is refused
	// with VIEWER_ACCESS_OFF.
	if _, err := dt.UpsertDatatable(ctx, &rolesetv1.UpsertDatatableRequest{Workspace: workspace, Name: "ledger",
		ClusterId: cluster, Database: t.database, AdminUser: t.user, AdminPassword: t.password,
		DefaultRole: "$none", ViewerAccess: proto.Bool(false), CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY}); err != nil {
		return fmt.Errorf("data table ledger: %w", err)
	}
	perms := map[string]*rolesetv1.Tenants{}
	for name, list := range tenants {
		id, ok := ids[name]
		if !ok {
			return fmt.Errorf("role %s is not in the catalog of cluster %s", name, cluster)
		}
		perms[id] = &rolesetv1.Tenants{Tenants: list}
	}
	_, err = dt.SetPermissions(ctx, &rolesetv1.SetPermissionsRequest{Workspace: workspace, Name: datatable,
		DefaultRole: "$none", Roles: perms})
	return err
}

// builderOff puts the demo back where its walkthrough starts: operators without builder rights.
func (l *loader) builderOff(ctx context.Context) (int64, error) {
	resp, err := policyv1.NewSettingsServiceClient(l.pol).UpdateOperatorSettings(ctx,
		&policyv1.UpdateOperatorSettingsRequest{Workspace: workspace, Patch: &policyv1.OperatorSettingsPatch{Builder: ptr(false)}})
	return resp.GetStreamPosition(), err
}

func (l *loader) summary(ctx context.Context, pos int64) error {
	// Price builder-on once billing has caught up with everything loaded: the number the
	// walkthrough shows, and a check that billing sees the demo.
	price, err := billingv1.NewBillingServiceClient(l.bill).CheckSeatCapForOperatorBuilder(ctx,
		&billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: workspace, MinPosition: pos})
	if err != nil {
		return fmt.Errorf("demo: billing: %w", err)
	}
	w := os.Stdout
	fmt.Fprintf(w, "\ndemo: workspace %q loaded (admin ada, developer devon, operators alice and bob; data table %q with roles %s)\n",
		workspace, datatable, strings.Join(roles, ", "))
	capSeats := "no seat cap"
	if c := price.GetCapSeats(); c > 0 {
		capSeats = fmt.Sprintf("cap %d", c)
	}
	fmt.Fprintf(w, "demo: builder rights are off; turning them on costs %s seat(s) (%s -> %s, %s)\n",
		milli(price.GetDeltaMilliseats()), price.GetBefore().GetSeats(), price.GetAfter().GetSeats(), capSeats)
	fmt.Fprintf(w, "demo: tokens (in %s, mode 600):\n", l.c.runDir)
	for _, n := range tokenFiles() {
		state := "reused"
		if contains(l.created, n) {
			state = "new"
		}
		fmt.Fprintf(w, "  %-13s %-6s %s\n", n, state, l.read(n))
	}
	fmt.Fprint(w, `demo: try this (README.md, "Walkthrough", has the full list):
  grpcurl -plaintext -H "authorization: Bearer $(cat .run/job-alice)" -d '{"reference":"datatable://main?as=viewer"}' \
    localhost:50052 millwright.roleset.v1.ConnectionService/ResolveConnection
  curl -s -H "authorization: Bearer $(cat .run/admin-token)" localhost:8080/v1/billing/seats
  curl -s -H "authorization: Bearer $(cat .run/ada-token)" localhost:8080/v1/workspaces/demo/operator-settings
`)
	return nil
}

// tokenFiles lists the files the demo keeps its tokens in, in the order they are printed.
func tokenFiles() []string {
	var out []string
	for _, m := range members {
		out = append(out, m.username+"-token")
	}
	for _, v := range viewers {
		out = append(out, "job-"+v)
	}
	return out
}

func milli(m int64) string {
	s := strconv.FormatFloat(float64(m)/1000, 'f', -1, 64)
	if m > 0 {
		return "+" + s
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
