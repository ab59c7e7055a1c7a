package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// demoTokens are the token files the demo loader writes (gateway/cmd/demo).
var demoTokens = []string{"ada-token", "devon-token", "alice-token", "bob-token", "job-alice", "job-bob"}

// checkDemo checks the demo `make run` loaded: what it promises exists (members, folders'
// effect on reads, three enabled roles with tenants, an RLS table with five rows, builder
// rights off, tokens of mode 600 that authenticate as whom they are named after), and that
// loading it again by hand, as run.sh runs the loader, changes nothing and reuses every token.
// It returns the state, for comparing after a restart.
func checkDemo(t *testing.T, st *Stack) map[string]string {
	t.Helper()
	first := demoState(t, st)
	require.Equal(t, "ada=ROLE_ADMIN,alice=ROLE_OPERATOR,bob=ROLE_OPERATOR,devon=ROLE_DEVELOPER", first["members"])
	require.Equal(t, "f/sales/daily_report,f/sales/fetch_orders,f/sales/summarize", first["readable by alice"])
	require.Equal(t, "sales_all:true,sales_apac:true,sales_emea:true", first["roles"])
	require.Equal(t, "$none admin=u/ada,sales_all=g/analysts,sales_apac=g/apac,sales_emea=g/emea", first["permissions"])
	require.Equal(t, "5", first["orders"])
	require.Equal(t, "all_regions,apac,emea", first["policies"])
	require.Equal(t, "sales_all:SELECT,sales_apac:SELECT,sales_emea:SELECT", first["grants"])
	require.Equal(t, "false", first["builder"])
	require.Contains(t, first["seats"], `"authors":"2","operators":"2","milliseats":"3000"`)
	for _, name := range demoTokens {
		fi, err := os.Stat(filepath.Join(st.Dir, name))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), name)
		if who, ok := strings.CutPrefix(name, "job-"); ok {
			require.Contains(t, first["token "+name], " TOKEN_KIND_JOB/demo/u/"+who+" viewer="+who+"@example.com", name)
		} else {
			require.Contains(t, first["token "+name], " TOKEN_KIND_USER/demo/"+strings.TrimSuffix(name, "-token"), name)
		}
	}

	load := exec.Command(st.Bin("demo"), "load")
	load.Env = append(cleanEnv(), st.DemoEnv(t)...)
	out, err := load.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), " new ", "the second load made new tokens:\n%s", out)
	require.Equal(t, first, demoState(t, st), "loading the demo again changed it")
	return first
}

// demoState is everything the demo loads, as comparable strings.
func demoState(t *testing.T, st *Stack) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+st.Token(t, "service-token"))
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+st.AdminToken(t))
	pol, rs, bill := dialT(t, st.Policy), dialT(t, st.Roleset), dialT(t, st.Billing)
	out := map[string]string{}

	snap, err := policyv1.NewWorkspaceServiceClient(pol).GetMembershipSnapshot(svc, &policyv1.GetMembershipSnapshotRequest{})
	require.NoError(t, err)
	var ms []string
	for _, m := range snap.GetMembers() {
		if m.GetWorkspace() == "demo" && !m.GetDisabled() {
			ms = append(ms, m.GetUsername()+"="+m.GetRole().String())
		}
	}
	sort.Strings(ms)
	out["members"] = strings.Join(ms, ",")
	for _, w := range snap.GetWorkspaces() {
		if w.GetWorkspace() == "demo" {
			out["builder"] = fmt.Sprint(w.GetBuilder())
		}
	}

	rd, err := policyv1.NewCatalogServiceClient(pol).ListReadable(svc, &policyv1.ListReadableRequest{Workspace: "demo", Username: "alice"})
	require.NoError(t, err)
	var paths []string
	for _, r := range rd.GetRunnables() {
		paths = append(paths, r.GetPath())
	}
	sort.Strings(paths)
	out["readable by alice"] = strings.Join(paths, ",")

	tok := policyv1.NewTokenServiceClient(pol)
	for _, name := range demoTokens {
		secret := st.Token(t, name)
		a, err := tok.Authenticate(svc, &policyv1.AuthenticateRequest{Token: secret})
		require.NoError(t, err, name)
		out["token "+name] = secret + " " + a.GetKind().String() + "/" + a.GetWorkspace() + "/" + a.GetUsername()
		if a.GetKind() == policyv1.TokenKind_TOKEN_KIND_JOB {
			run, err := policyv1.NewRunServiceClient(pol).GetRunIdentity(svc, &policyv1.GetRunIdentityRequest{JobToken: secret})
			require.NoError(t, err, name)
			out["token "+name] += run.GetRun().GetPermissionedAs() + " viewer=" + run.GetRun().GetViewerEmail()
		}
	}

	roles, err := rolesetv1.NewRoleServiceClient(rs).ListRoles(admin, &rolesetv1.ListRolesRequest{ClusterId: "local"})
	require.NoError(t, err)
	var rn []string
	names := map[string]string{"admin": "admin"}
	for _, r := range roles.GetRoles() {
		rn = append(rn, fmt.Sprintf("%s:%v", r.GetName(), r.GetEnabled()))
		names[r.GetRoleId()] = r.GetName()
	}
	sort.Strings(rn)
	out["roles"] = strings.Join(rn, ",")
	perms, err := rolesetv1.NewDatatableServiceClient(rs).GetPermissions(admin, &rolesetv1.GetPermissionsRequest{Workspace: "demo", Name: "main"})
	require.NoError(t, err)
	var ps []string
	for id, ten := range perms.GetRoles() {
		ps = append(ps, names[id]+"="+strings.Join(ten.GetTenants(), "|"))
	}
	sort.Strings(ps)
	out["permissions"] = perms.GetDefaultRole() + " " + strings.Join(ps, ",")

	// The loader priced builder-on at policy's head before it exited, so billing has counted the
	// demo by now. Seen once under heavy load: an empty count (position reported below) right
	// after that; retried briefly and logged, so the anomaly stays visible without flaking.
	var seats *billingv1.GetSeatUsageResponse
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		seats, err = billingv1.NewBillingServiceClient(bill).GetSeatUsage(admin, &billingv1.GetSeatUsageRequest{})
		require.NoError(t, err)
		if seats.GetUsage().GetMilliseats() > 0 || time.Now().After(deadline) {
			break
		}
		t.Logf("billing: empty seat usage at position %d; retrying", seats.GetPosition())
		time.Sleep(100 * time.Millisecond)
	}
	seats.Position = 0 // the stream moves on every load (settings are written again)
	out["seats"] = jsonOf(t, seats)

	out["orders"] = psqlValue(t, st.SuperuserURL(t, "millwright_demo"), "SELECT count(*) FROM orders")
	out["policies"] = psqlValue(t, st.SuperuserURL(t, "millwright_demo"),
		"SELECT string_agg(policyname, ',' ORDER BY policyname) FROM pg_policies WHERE tablename = 'orders'")
	out["grants"] = psqlValue(t, st.SuperuserURL(t, "millwright_demo"),
		"SELECT string_agg(grantee || ':' || privilege_type, ',' ORDER BY grantee) FROM information_schema.role_table_grants WHERE table_name = 'orders' AND grantee LIKE 'sales_%'")
	return out
}

func dialT(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

func jsonOf(t *testing.T, m proto.Message) string {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	require.NoError(t, err)
	return strings.ReplaceAll(string(b), " ", "")
}

func psqlValue(t *testing.T, url, query string) string {
	t.Helper()
	out, err := exec.Command("psql", url, "-XAtqc", query).CombinedOutput()
	require.NoError(t, err, "psql: %s", out)
	return strings.TrimSpace(string(out))
}

// cleanEnv is the test's environment without anything that would point a child at another
// stack or database.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "MILLWRIGHT_") || strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
