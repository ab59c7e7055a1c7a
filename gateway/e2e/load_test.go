package e2e

// The viewer load shared by TestPostgresRestart (pgrestart_test.go) and TestSoak
// (soak_test.go): three replicas of every service on the stack's one Postgres, 20 viewers
// with a job token each spread over the demo's groups, the login every replica names for each
// before anything changes, and the model that judges an answer given while a writer changes
// what is right.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// replicaChain is one replica of each service; roleset and billing follow that chain's policy.
type replicaChain struct {
	name     string
	policy   policyv1.RunServiceClient
	settings policyv1.SettingsServiceClient
	builder  policyv1.BuilderServiceClient
	roleset  rolesetv1.ConnectionServiceClient
	roles    rolesetv1.RoleServiceClient
	billing  billingv1.BillingServiceClient
	metrics  []string // the /metrics addresses of its policy, roleset and billing
}

// The viewers' groups, by i%5 (the demo's roles: g/emea -> sales_emea, g/apac -> sales_apac,
// g/analysts -> sales_all). Classes 1 and 4 hold a set login of {sales_all, sales_emea}: taken
// out of g/emea, or with sales_emea disabled, they fall back to sales_all's own login, the
// answer class 2 gets.
var viewerGroups = [5][]string{{"apac"}, {"emea", "analysts"}, {"analysts"}, {"apac", "analysts"}, {"emea", "analysts"}}

// loadViewers is how many viewers the load spreads its resolves over.
const loadViewers = 20

// viewerLoad is the stack, its three chains and the viewers, as startViewerLoad set them up.
type viewerLoad struct {
	st                   *Stack
	chains               []replicaChain
	adminToken, svcToken string
	admin, svc, ada      context.Context // bearers: superadmin, service, the demo's workspace admin
	ws                   policyv1.WorkspaceServiceClient
	viewers              []string
	job                  map[string]string   // viewer -> job token of a run they started
	members              map[string][]string // group -> members, as last written
	before               map[string]string   // viewer -> the login every replica named at the start
	fallback             string              // sales_all's own login
}

// startViewerLoad starts the stack and two more chains (startReplicasB), makes the viewers
// (members with a job token each, as the demo makes alice's), puts the demo's data table in
// direct mode, and waits (bounded) until every replica names each viewer the login its roles
// decide, the same on every replica.
func startViewerLoad(ctx context.Context, t *testing.T) *viewerLoad {
	t.Helper()
	st := StartStack(t)
	dial := func(addr string) *grpc.ClientConn { return dialT(t, addr) }
	newChain := func(name, pol, rs, bil string, metrics []string) replicaChain {
		p, r := dial(pol), dial(rs)
		return replicaChain{name: name, policy: policyv1.NewRunServiceClient(p), settings: policyv1.NewSettingsServiceClient(p),
			builder: policyv1.NewBuilderServiceClient(p), roleset: rolesetv1.NewConnectionServiceClient(r),
			roles: rolesetv1.NewRoleServiceClient(r), billing: billingv1.NewBillingServiceClient(dial(bil)), metrics: metrics}
	}
	l := &viewerLoad{st: st, chains: []replicaChain{newChain("A", st.Policy, st.Roleset, st.Billing, st.metrics)}}
	for _, name := range []string{"B", "C"} {
		r := startReplicasB(t, st)
		l.chains = append(l.chains, newChain(name, r.policy, r.roleset, r.billing, r.metrics))
	}

	l.adminToken, l.svcToken = st.AdminToken(t), st.Token(t, "service-token")
	l.admin, l.svc = repBearer(ctx, l.adminToken), repBearer(ctx, l.svcToken)
	l.ada = repBearer(ctx, st.Token(t, "ada-token"))
	polA := dial(st.Policy)
	l.ws = policyv1.NewWorkspaceServiceClient(polA)
	tokens := policyv1.NewTokenServiceClient(polA)

	l.viewers = make([]string, loadViewers)
	l.job = map[string]string{}
	l.members = map[string][]string{"emea": {"alice"}, "apac": {"bob"}, "analysts": {"devon"}}
	for i := range l.viewers {
		v := fmt.Sprintf("viewer%02d", i)
		l.viewers[i] = v
		_, err := l.ws.UpsertMember(l.admin, &policyv1.UpsertMemberRequest{Workspace: "demo", Username: v,
			Email: v + "@example.com", Role: policyv1.Role_ROLE_OPERATOR})
		require.NoError(t, err)
		tok, err := tokens.CreateToken(l.admin, &policyv1.CreateTokenRequest{Workspace: "demo", Username: v,
			Label: "load", ExpiresAt: timestamppb.New(time.Now().Add(24 * time.Hour))})
		require.NoError(t, err)
		run, err := l.chains[0].policy.RecordRun(l.svc, &policyv1.RecordRunRequest{Workspace: "demo", JobId: repJobID(t),
			PermissionedAs: "u/" + v, Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: tok.GetToken()})
		require.NoError(t, err)
		l.job[v] = run.GetJobToken()
		for _, g := range viewerGroups[i%5] {
			l.members[g] = append(l.members[g], v)
		}
	}
	for g, m := range l.members {
		_, err := l.ws.UpsertGroup(l.ada, &policyv1.UpsertGroupRequest{Workspace: "demo", Name: g, Members: m})
		require.NoError(t, err, "group %s", g)
	}
	directMode(l.admin, t, st, rolesetv1.NewDatatableServiceClient(dial(st.Roleset)))

	// The answer before any change: each viewer's login, the same on every replica (the group
	// changes reach roleset through policy's stream: polled, bounded).
	wantRoles := map[int][]string{0: {"sales_apac"}, 1: {"sales_all", "sales_emea"}, 2: {"sales_all"},
		3: {"sales_all", "sales_apac"}, 4: {"sales_all", "sales_emea"}}
	l.before = map[string]string{}
	for i, v := range l.viewers {
		for _, c := range l.chains {
			repPoll(t, 10*time.Second, func() (bool, string) {
				r, err := l.resolve(ctx, c, v)
				if err != nil || !slices.Equal(repSorted(r.GetRoles()), wantRoles[i%5]) {
					return false, fmt.Sprintf("%s on %s: %v %v", v, c.name, r.GetRoles(), err)
				}
				if l.before[v] == "" {
					l.before[v] = r.GetUser()
				}
				return r.GetUser() == l.before[v], fmt.Sprintf("%s on %s: %s, on A %s", v, c.name, r.GetUser(), l.before[v])
			})
		}
	}
	l.fallback = l.before[l.viewers[2]]
	return l
}

// resolve asks chain c for viewer v's connection to the demo's data table, as v's job does
// (2 s deadline).
func (l *viewerLoad) resolve(ctx context.Context, c replicaChain, v string) (*rolesetv1.ResolveConnectionResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.roleset.ResolveConnection(repBearer(ctx, l.job[v]), &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main?as=viewer"})
}

// emeaSets are the viewers of classes 1 and 4: a set login of {sales_all, sales_emea}, which
// falls back to sales_all's own login without sales_emea.
func (l *viewerLoad) emeaSets() []string {
	var out []string
	for i, v := range l.viewers {
		if i%5 == 1 || i%5 == 4 {
			out = append(out, v)
		}
	}
	return out
}

// allowedAnswers is what a call may answer now, set only by the one writer that changes it:
// before a change both the old and the new answer, once every replica has the change only the
// new one.
type allowedAnswers struct{ p atomic.Pointer[[]string] }

func newAllowed(answers ...string) *allowedAnswers {
	a := &allowedAnswers{}
	a.Set(answers...)
	return a
}

// Set replaces what a call may answer from now on.
func (a *allowedAnswers) Set(answers ...string) { a.p.Store(&answers) }

// verdict is one judged call: its answer (or error) and what was allowed around it.
type verdict struct {
	got      string
	err      error
	right    bool // no error, and got was allowed when the call started or when it returned
	was, now []string
}

// judge makes call and judges its answer. A call in flight across a change may see either
// side of it, so an answer is right if it was allowed when the call started or when it
// returned.
func (a *allowedAnswers) judge(call func() (string, error)) verdict {
	was := *a.p.Load()
	got, err := call()
	now := *a.p.Load()
	return verdict{got: got, err: err, was: was, now: now,
		right: err == nil && (slices.Contains(was, got) || slices.Contains(now, got))}
}

// violationLog keeps the first 20 violations a load finds (more would repeat them).
type violationLog struct {
	mu   sync.Mutex
	list []string
}

func (l *violationLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.list) < 20 {
		l.list = append(l.list, fmt.Sprintf(format, args...))
	}
}

func (l *violationLog) requireNone(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.list)
}

// directMode puts the demo's data table in direct mode, whose answer is the login itself (in
// proxy mode it is a ticket for it; roleset/internal/itest TestProxyTickets covers the proxy).
func directMode(admin context.Context, t *testing.T, st *Stack, c rolesetv1.DatatableServiceClient) {
	t.Helper()
	_, err := c.UpsertDatatable(admin, &rolesetv1.UpsertDatatableRequest{
		Workspace: "demo", Name: "main", ClusterId: "local", Database: "millwright_demo", AdminUser: "millwright_demo_admin",
		AdminPassword: st.Token(t, "demo-admin-password"), DefaultRole: "$none",
		CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT})
	require.NoError(t, err)
}
