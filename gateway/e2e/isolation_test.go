package e2e

// The isolation matrix and the attack corpus, on one stack start (starting it is what costs).
//
// Workspace A is the demo `make run` loads ("demo": members, groups, folders, catalog, worker
// tags, settings, user and job tokens, the data table "main" with its roles, billing's count of
// it). Workspace B ("evil") is made here through the public APIs, with one identity of each
// kind a caller can hold in it (isolationIdentities). B also has its own data table "evedt"
// on A's cluster and database, with one role of its own: B's admin could then read A's rows
// if a role of A's data table were usable through B's.
//
// testdata/isolation.json: every method of every millwright service, enumerated from the
// embedded descriptors (pkg/apidesc), must have an entry (a new RPC fails the test until it has
// one), and every entry names a method that exists. An entry is
//
//	{"requests": [<protojson request naming A's objects>, ...],
//	 "not_workspace_scoped": "<why the method names no workspace, if so>",
//	 "refusals": ["<gRPC code name>", ...]}
//
// Every request is sent by every B identity over gRPC and over REST (the route of the
// method's google.api.http annotation) and must be refused with one of the refusal codes
// (default: PermissionDenied, NotFound, Unauthenticated; InvalidArgument and
// FailedPrecondition only where an entry lists them, so that a malformed request in the data
// file cannot pass for a refusal), the same code and reason on both transports, and nothing
// sent back may contain A's secrets or member emails (unless the request itself carried them).
// After the matrix and the corpus, A's state, read through the APIs, and every row of every
// service database must be unchanged (isolationState).
//
// testdata/attacks.json: the attack corpus, one case per attempt that must be refused:
//
//	{"name": "<unique>", "issue": "<issue item, e.g. 11.2>", "identity": "<see below>",
//	 "method": "<full method name>", "request": <protojson>, "transports": ["grpc", "rest"],
//	 "want": {"code": "<gRPC code name>", "reason": "ERROR_REASON_...",
//	          "rule": "<ErrorInfo metadata rule, optional>", "field": "<metadata field, optional>"}}
//
// Each case runs on each listed transport and must get exactly that code and reason (and rule
// and field when given). Identities: superadmin, service, a_admin (A's admin, user token),
// a_job (a job token of a run in A) and the B identities of isolationIdentities. Requests of
// both files may use the placeholders of (*isoSetup).values, e.g. "{{A.workspace}}".

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// isolationIdentities are the identities a caller can hold in workspace B, and a client of
// the gateway with no token at all.
var isolationIdentities = []string{"b_admin", "b_developer", "b_operator", "b_user", "b_job", "b_scoped", "anonymous"}

// attackIdentities are the identities a case of the attack corpus may name.
var attackIdentities = append([]string{"superadmin", "service", "a_admin", "a_job"}, isolationIdentities...)

var defaultRefusals = []string{"PermissionDenied", "NotFound", "Unauthenticated"}

type isoMethod struct {
	Requests           []json.RawMessage `json:"requests"`
	NotWorkspaceScoped string            `json:"not_workspace_scoped"`
	Refusals           []string          `json:"refusals"`
}

type isoFile struct {
	About   string               `json:"about"`
	Methods map[string]isoMethod `json:"methods"`
}

type attackCase struct {
	Name       string          `json:"name"`
	Issue      string          `json:"issue"`
	Identity   string          `json:"identity"`
	Method     string          `json:"method"`
	Request    json.RawMessage `json:"request"`
	Transports []string        `json:"transports"`
	Want       struct {
		Code   string `json:"code"`
		Reason string `json:"reason"`
		Rule   string `json:"rule"`
		Field  string `json:"field"`
	} `json:"want"`
}

type attackFile struct {
	About string       `json:"about"`
	Cases []attackCase `json:"cases"`
}

func readStrict(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), path)
}

// TestIsolation runs the isolation matrix and the attack corpus (see the top of this file).
func TestIsolation(t *testing.T) {
	needsStack(t)
	t.Parallel()
	var iso isoFile
	readStrict(t, "testdata/isolation.json", &iso)
	var atk attackFile
	readStrict(t, "testdata/attacks.json", &atk)
	methods := rpcMethods(t)
	// The data files are checked before the stack starts: a missing method fails in a second.
	var missing []string
	for name := range methods {
		if _, ok := iso.Methods[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("new RPC %s: add it to testdata/isolation.json", name)
	}
	for name, m := range iso.Methods {
		if _, ok := methods[name]; !ok {
			t.Errorf("testdata/isolation.json names %s, which is not an RPC (removed or renamed?)", name)
		}
		if len(m.Requests) == 0 {
			t.Errorf("%s: no requests", name)
		}
		for _, c := range m.Refusals {
			if _, ok := rsCodeByName(c); !ok || c == "OK" {
				t.Errorf("%s: refusal %q is not a gRPC error code", name, c)
			}
		}
	}
	seen := map[string]bool{}
	for _, c := range atk.Cases {
		if c.Name == "" || seen[c.Name] {
			t.Errorf("attack case %q: empty or duplicate name", c.Name)
		}
		seen[c.Name] = true
		if _, ok := methods[c.Method]; !ok {
			t.Errorf("attack case %q: no RPC %s", c.Name, c.Method)
		}
		if !slices.Contains(attackIdentities, c.Identity) {
			t.Errorf("attack case %q: identity %q is none of %v", c.Name, c.Identity, attackIdentities)
		}
		for _, tr := range c.Transports {
			if tr != "grpc" && tr != "rest" {
				t.Errorf("attack case %q: transport %q is neither grpc nor rest", c.Name, tr)
			}
		}
		if code, ok := rsCodeByName(c.Want.Code); !ok || code == codes.OK || c.Want.Reason == "" || c.Issue == "" || len(c.Transports) == 0 {
			t.Errorf("attack case %q: want a refusal code and reason, an issue item and transports", c.Name)
		}
	}
	if t.Failed() {
		return
	}

	st := StartStack(t)
	s := setupIsolation(t, st)
	before := isolationState(t, st)
	cl := newCaller(t, st)

	t.Run("matrix", func(t *testing.T) {
		dist := map[string]int{}
		names := make([]string, 0, len(methods))
		for n := range methods {
			names = append(names, n)
		}
		sort.Strings(names)
		calls := 0
		for _, name := range names {
			entry, md := iso.Methods[name], methods[name]
			accepted := entry.Refusals
			if len(accepted) == 0 {
				accepted = defaultRefusals
			}
			t.Run(name, func(t *testing.T) {
				for i, raw := range entry.Requests {
					js := s.fill(t, string(raw))
					req := request(t, md, js)
					for _, who := range isolationIdentities {
						var got [2]callResult
						for k, tr := range []string{"grpc", "rest"} {
							r := cl.call(t, tr, md, req, s.tokens[who])
							calls++
							got[k] = r
							dist[tr+" "+r.Code.String()+" "+r.Reason]++
							where := fmt.Sprintf("request %d as %s over %s", i, who, tr)
							if !assert.NotEqual(t, codes.OK, r.Code, "%s SUCCEEDED on A's objects: %s", where, r.Text) {
								continue
							}
							assert.Contains(t, accepted, r.Code.String(), "%s: refused with an unexpected code: %s", where, r.Text)
							if tr == "rest" {
								assert.GreaterOrEqual(t, r.HTTP, 400, where)
							}
							for _, secret := range s.sentinels {
								if !strings.Contains(js, secret) {
									assert.NotContains(t, r.Text, secret, "%s: the answer echoes A's data", where)
								}
							}
						}
						assert.Equal(t, [2]string{got[0].Code.String(), got[0].Reason}, [2]string{got[1].Code.String(), got[1].Reason},
							"request %d as %s: gRPC and REST disagree", i, who)
					}
				}
			})
		}
		keys := make([]string, 0, len(dist))
		for k := range dist {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "\n  %5d  %s", dist[k], k)
		}
		t.Logf("isolation matrix: %d methods, %d calls; refusals by transport, code and reason:%s", len(names), calls, b.String())
	})

	t.Run("attacks", func(t *testing.T) {
		for _, c := range atk.Cases {
			t.Run(c.Name, func(t *testing.T) {
				token, ok := s.tokens[c.Identity]
				require.True(t, ok, "unknown identity %q", c.Identity)
				md := methods[c.Method]
				req := request(t, md, s.fill(t, string(c.Request)))
				for _, tr := range c.Transports {
					r := cl.call(t, tr, md, req, token)
					assert.Equal(t, c.Want.Code, r.Code.String(), "%s (issue %s) over %s: %s", c.Name, c.Issue, tr, r.Text)
					assert.Equal(t, c.Want.Reason, r.Reason, "%s over %s: %s", c.Name, tr, r.Text)
					if c.Want.Rule != "" {
						assert.Equal(t, c.Want.Rule, r.MD["rule"], "%s over %s: %s", c.Name, tr, r.Text)
					}
					if c.Want.Field != "" {
						assert.Equal(t, c.Want.Field, r.MD["field"], "%s over %s: %s", c.Name, tr, r.Text)
					}
				}
			})
		}
	})

	require.Equal(t, before, isolationState(t, st), "A's state changed during the matrix or the corpus")
}

// isoSetup is workspace B, the tokens of every identity, and the values of the placeholders.
type isoSetup struct {
	tokens    map[string]string
	values    map[string]string
	sentinels []string // A's data that no refusal may carry
}

var placeholder = regexp.MustCompile(`\{\{([A-Za-z_.]+)\}\}`)

// fill replaces every {{name}} of a request; an unknown name fails the test.
func (s *isoSetup) fill(t *testing.T, js string) string {
	t.Helper()
	return placeholder.ReplaceAllStringFunc(js, func(m string) string {
		name := placeholder.FindStringSubmatch(m)[1]
		if name == "new_job_id" {
			return newUUID(t)
		}
		v, ok := s.values[name]
		require.True(t, ok, "unknown placeholder %s", m)
		b, _ := json.Marshal(v)
		return strings.Trim(string(b), `"`)
	})
}

func newUUID(t *testing.T) string {
	var b [16]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

const (
	wsB       = "evil"
	datatable = "evedt"
)

// setupIsolation makes workspace B through the public APIs and collects A's ids.
func setupIsolation(t *testing.T, st *Stack) *isoSetup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	admin, svc := as(st.AdminToken(t)), as(st.Token(t, "service-token"))
	pol, rs := dialT(t, st.Policy), dialT(t, st.Roleset)
	ws, tok, runs := policyv1.NewWorkspaceServiceClient(pol), policyv1.NewTokenServiceClient(pol), policyv1.NewRunServiceClient(pol)
	s := &isoSetup{tokens: map[string]string{
		"superadmin": st.AdminToken(t), "service": st.Token(t, "service-token"),
		"a_admin": st.Token(t, "ada-token"), "a_job": st.Token(t, "job-alice"), "anonymous": "",
	}}

	// Workspace B: an admin, a developer and an operator, builder rights on.
	_, err := ws.CreateWorkspace(admin, &policyv1.CreateWorkspaceRequest{Workspace: wsB, Name: "Evil Corp",
		AdminEmail: "eve@evil.example", AdminUsername: "eve"})
	require.NoError(t, err)
	for _, m := range []*policyv1.UpsertMemberRequest{
		{Workspace: wsB, Username: "dan", Email: "dan@evil.example", Role: policyv1.Role_ROLE_DEVELOPER},
		{Workspace: wsB, Username: "olly", Email: "olly@evil.example", Role: policyv1.Role_ROLE_OPERATOR},
	} {
		_, err := ws.UpsertMember(admin, m)
		require.NoError(t, err)
	}
	_, err = policyv1.NewSettingsServiceClient(pol).UpdateOperatorSettings(admin, &policyv1.UpdateOperatorSettingsRequest{
		Workspace: wsB, Patch: &policyv1.OperatorSettingsPatch{Builder: ptr(true)}})
	require.NoError(t, err)
	exp := timestamppb.New(time.Now().Add(24 * time.Hour))
	mint := func(ctx context.Context, user string, scopes ...string) string {
		r, err := tok.CreateToken(ctx, &policyv1.CreateTokenRequest{Workspace: wsB, Username: user, Scopes: scopes, ExpiresAt: exp})
		require.NoError(t, err)
		return r.GetToken()
	}
	s.tokens["b_admin"] = mint(admin, "eve")
	s.tokens["b_developer"] = mint(admin, "dan")
	s.tokens["b_operator"] = mint(admin, "olly")
	// A token a member minted for itself with its own token (not the superadmin's).
	s.tokens["b_user"] = mint(as(s.tokens["b_developer"]), "")
	s.tokens["b_scoped"] = mint(admin, "eve", "catalog:read", "workspace:read")
	// The job token of a run B's admin started: its owner and viewer are B's admin.
	rr, err := runs.RecordRun(svc, &policyv1.RecordRunRequest{Workspace: wsB, JobId: newUUID(t), PermissionedAs: "u/eve",
		Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: s.tokens["b_admin"]})
	require.NoError(t, err)
	s.tokens["b_job"] = rr.GetJobToken()

	// A's ids, read with the service and superadmin tokens.
	aRun, err := runs.GetRunIdentity(svc, &policyv1.GetRunIdentityRequest{JobToken: s.tokens["a_job"]})
	require.NoError(t, err)
	aTok, err := tok.Authenticate(svc, &policyv1.AuthenticateRequest{Token: s.tokens["a_admin"]})
	require.NoError(t, err)
	roles := rolesetv1.NewRoleServiceClient(rs)
	list, err := roles.ListRoles(admin, &rolesetv1.ListRolesRequest{ClusterId: "local"})
	require.NoError(t, err)
	aRole := ""
	for _, r := range list.GetRoles() {
		if r.GetName() == "sales_all" {
			aRole = r.GetRoleId()
		}
	}
	require.NotEmpty(t, aRole, "the demo's role sales_all")

	// B's data table, on A's cluster and database, with a role attached only to it.
	br, err := roles.CreateRole(admin, &rolesetv1.CreateRoleRequest{ClusterId: "local", Name: "evil_reader"})
	require.NoError(t, err)
	bRole := br.GetRole().GetRoleId()
	dt := rolesetv1.NewDatatableServiceClient(rs)
	_, err = dt.UpsertDatatable(admin, &rolesetv1.UpsertDatatableRequest{Workspace: wsB, Name: datatable, ClusterId: "local",
		Database: "millwright_demo", AdminUser: "evil_owner", AdminPassword: "not-a-real-password", DefaultRole: "$none"})
	require.NoError(t, err)
	_, err = dt.SetPermissions(admin, &rolesetv1.SetPermissionsRequest{Workspace: wsB, Name: datatable, DefaultRole: "$none",
		Roles: map[string]*rolesetv1.Tenants{bRole: {Tenants: []string{"*"}}}})
	require.NoError(t, err)
	// The control: B's admin's job does get B's own role through B's data table, so the
	// refusals of A's role through it are the attachment rule, not a broken setup.
	conn, err := rolesetv1.NewConnectionServiceClient(rs).ResolveConnection(as(s.tokens["b_job"]),
		&rolesetv1.ResolveConnectionRequest{Reference: "datatable://" + datatable + "?role=evil_reader"})
	require.NoError(t, err)
	require.Equal(t, []string{"evil_reader"}, conn.GetRoles())

	s.values = map[string]string{
		"A.workspace": "demo", "A.cluster": "local", "A.datatable": "main", "A.database": "millwright_demo",
		"A.role": "sales_all", "A.role_id": aRole,
		"A.admin_token": s.tokens["a_admin"], "A.user_token": st.Token(t, "alice-token"), "A.token_id": aTok.GetTokenId(),
		"A.job_token": s.tokens["a_job"], "A.job_id": aRun.GetRun().GetJobId(),
		"A.flow_path": "f/sales/daily_report", "A.script_path": "f/finance/payroll", "A.script_hash": "c1b2c3d4e5f60718",
		"A.admin_email": "ada@example.com", "A.operator_email": "alice@example.com",
		"B.workspace": wsB, "B.datatable": datatable, "B.role": "evil_reader", "B.role_id": bRole,
		"expires": exp.AsTime().UTC().Format(time.RFC3339),
	}
	s.sentinels = []string{"ada@example.com", "devon@example.com", "alice@example.com", "bob@example.com",
		st.Token(t, "demo-admin-password"), "millwright_demo_admin"}
	for _, f := range demoTokens {
		s.sentinels = append(s.sentinels, st.Token(t, f))
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// isolationState is A's state as its admin and the installation read it through the APIs:
// what the demo loads (demoState), plus settings, worker tags, every member's tenancy and
// readable items, the clusters and the usage reports; and every row of every service database
// and the cluster's roles, so that a refused call that wrote anything is seen.
func isolationState(t *testing.T, st *Stack) map[string]string {
	t.Helper()
	out := demoState(t, st)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+st.Token(t, "service-token"))
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+st.AdminToken(t))
	pol, rs, bill := dialT(t, st.Policy), dialT(t, st.Roleset), dialT(t, st.Billing)
	set, err := policyv1.NewSettingsServiceClient(pol).GetOperatorSettings(svc, &policyv1.GetOperatorSettingsRequest{Workspace: "demo"})
	require.NoError(t, err)
	out["settings"] = jsonOf(t, set)
	tags, err := policyv1.NewTagServiceClient(pol).GetWorkerTags(svc, &policyv1.GetWorkerTagsRequest{Workspace: "demo"})
	require.NoError(t, err)
	out["tags"] = jsonOf(t, tags)
	for _, u := range []string{"ada", "devon", "alice", "bob"} {
		ten, err := policyv1.NewWorkspaceServiceClient(pol).ResolveTenancy(svc, &policyv1.ResolveTenancyRequest{Workspace: "demo", Username: u})
		require.NoError(t, err, u)
		out["tenancy "+u] = jsonOf(t, ten)
		rd, err := policyv1.NewCatalogServiceClient(pol).ListReadable(svc, &policyv1.ListReadableRequest{Workspace: "demo", Username: u})
		require.NoError(t, err, u)
		out["readable "+u] = jsonOf(t, rd)
	}
	cl, err := rolesetv1.NewClusterServiceClient(rs).ListClusters(admin, &rolesetv1.ListClustersRequest{})
	require.NoError(t, err)
	out["clusters"] = jsonOf(t, cl)
	roles, err := rolesetv1.NewRoleServiceClient(rs).ListRoles(admin, &rolesetv1.ListRolesRequest{ClusterId: "local"})
	require.NoError(t, err)
	out["roles full"] = jsonOf(t, roles)
	perms, err := rolesetv1.NewDatatableServiceClient(rs).GetPermissions(admin, &rolesetv1.GetPermissionsRequest{Workspace: "demo", Name: "main"})
	require.NoError(t, err)
	out["permissions full"] = jsonOf(t, perms)
	rep, err := billingv1.NewBillingServiceClient(bill).ListUsageReports(admin, &billingv1.ListUsageReportsRequest{PageSize: 500})
	require.NoError(t, err)
	out["usage reports"] = strconv.Itoa(len(rep.GetReports()))

	// And below the APIs: every row of every table of each service's database, and the roles
	// and memberships of the cluster the data tables are on. A refused call writes nothing but
	// its audit event (the trail records refusals on purpose: docs/audit.md).
	for _, db := range []string{"millwright_policy", "millwright_roleset", "millwright_billing"} {
		out["db "+db] = psqlValue(t, st.SuperuserURL(t, db), `SELECT string_agg(n || '=' || md5(query_to_xml(
			format('SELECT * FROM %s t ORDER BY t::text', n), true, false, '')::text), E'\n' ORDER BY n)
			FROM (SELECT format('%I.%I', table_schema, table_name) AS n FROM information_schema.tables
			      WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')
			        AND table_name NOT IN ('audit_event', 'audit_head')) tables`)
	}
	out["cluster roles"] = psqlValue(t, st.SuperuserURL(t, "postgres"), `SELECT
		(SELECT string_agg(format('%s login=%s', rolname, rolcanlogin), ',' ORDER BY rolname) FROM pg_roles) || ' ' ||
		(SELECT coalesce(string_agg(format('%s>%s', roleid::regrole, member::regrole), ',' ORDER BY 1), '') FROM pg_auth_members)`)
	return out
}
