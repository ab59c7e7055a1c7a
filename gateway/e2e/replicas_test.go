package e2e

// This file runs two replicas of every service against one Postgres: replica A of each is the
// stack's (scripts/run.sh), replica B is started here from the same binaries, on the same
// databases, with the environment run.sh gives its services. The B replicas talk to each other
// (roleset B and billing B follow policy B; policy B prices with billing B), so each chain
// stands on its own and the only thing the two share is the databases.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestReplicasEndToEnd runs two replicas of policy, roleset and billing plus the gateway on one
// Postgres and checks what "stateless replicas kept honest by an invalidation stream" promises:
// builder rights revoked through policy A are refused by policy B within 100 ms; a role
// disabled through roleset A makes roleset B stop handing out every set login holding it (and
// the login is gone from the cluster); the unused-login sweep run on both roleset replicas at
// once drops each stale login exactly once and nothing else.
func TestReplicasEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack and a second replica of each service; skipped with -short")
	}
	st := StartStack(t)
	b := startReplicasB(t, st)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dial := func(addr string) *grpc.ClientConn { return dialT(t, addr) }
	polA, polB := dial(st.Policy), dial(b.policy)
	rsA, rsB := dial(st.Roleset), dial(b.roleset)

	admin := repBearer(ctx, st.AdminToken(t))
	ada := repBearer(ctx, st.Token(t, "ada-token"))
	alice := repBearer(ctx, st.Token(t, "alice-token"))

	t.Run("builder revoked through policy A is refused by policy B within 100ms", func(t *testing.T) {
		setA, setB := policyv1.NewSettingsServiceClient(polA), policyv1.NewSettingsServiceClient(polB)
		builderA, builderB := policyv1.NewBuilderServiceClient(polA), policyv1.NewBuilderServiceClient(polB)
		setBuilder := func(c policyv1.SettingsServiceClient, on bool) {
			t.Helper()
			// As the workspace admin; turning builder on is priced by billing first (replica A
			// of policy asks billing A, replica B asks billing B), so both must be reachable.
			resp, err := c.UpdateOperatorSettings(ada, &policyv1.UpdateOperatorSettingsRequest{Workspace: "demo",
				Patch: &policyv1.OperatorSettingsPatch{Builder: &on}})
			require.NoError(t, err)
			require.Equal(t, on, resp.GetSettings().GetBuilder())
		}
		canBuild := func(c policyv1.SettingsServiceClient) error {
			_, err := c.CheckOperatorCanBuild(alice, &policyv1.CheckOperatorCanBuildRequest{Workspace: "demo", Username: "alice"})
			return err
		}
		checkFlow := func(c policyv1.BuilderServiceClient) error {
			_, err := c.CheckFlow(alice, &policyv1.CheckFlowRequest{Workspace: "demo", Action: policyv1.FlowAction_FLOW_ACTION_SAVE,
				FlowJson: `{"modules": [{"id": "a", "value": {"type": "script", "path": "f/sales/fetch_orders"}},
					{"id": "b", "value": {"type": "script", "path": "f/sales/summarize"}}]}`})
			return err
		}
		// bothAllow waits (bounded) until both replicas allow alice: after it, B's cache holds
		// "on", so the revocation below measures B's invalidation, not a cold read.
		bothAllow := func() {
			t.Helper()
			for _, c := range []policyv1.SettingsServiceClient{setA, setB} {
				repPoll(t, 5*time.Second, func() (bool, string) {
					err := canBuild(c)
					return err == nil, fmt.Sprintf("CheckOperatorCanBuild: %v", err)
				})
			}
		}

		// The demo starts with builder off: both replicas refuse.
		require.True(t, repBuilderOff(canBuild(setA)), "%v", canBuild(setA))
		require.True(t, repBuilderOff(canBuild(setB)), "%v", canBuild(setB))

		setBuilder(setA, true)
		bothAllow()
		require.NoError(t, checkFlow(builderA))
		require.NoError(t, checkFlow(builderB))

		// Ten revocations, each timed from replica A acknowledging the change (it is committed
		// then) to the first refusal from replica B. Every one must reach B within a second (a
		// revocation never waits for a cache TTL), and nine of ten (p90) within 100 ms: this
		// runs under -race on a shared 2-core machine next to Postgres and six service
		// processes, where one scheduling hiccup in one trial says nothing about the stream,
		// while a slow invalidation path (polling, TTL) would miss on every trial, not one.
		const trials = 10
		var tooks []time.Duration
		for i := range trials {
			if i > 0 {
				setBuilder(setB, true) // on through B this time (priced by billing B)
				bothAllow()
			}
			setBuilder(setA, false)
			start := time.Now()
			var last error
			for last = canBuild(setB); !repBuilderOff(last); last = canBuild(setB) {
				require.Less(t, time.Since(start), time.Second, "trial %d: B still answers %v a second after the revoke", i, last)
			}
			tooks = append(tooks, time.Since(start))
			require.True(t, repBuilderOff(canBuild(setA)), "A must refuse right after its own revoke")
		}
		slices.Sort(tooks)
		t.Logf("revocation A -> B over %d trials: %v", trials, tooks)
		require.Less(t, tooks[trials*9/10-1], 100*time.Millisecond, "p90 of A -> B revocation: %v", tooks)

		// The builder checks the platform calls answer the same on B.
		err := checkFlow(builderB)
		require.True(t, repBuilderOff(err), "CheckFlow on B after the revoke: %v", err)
	})

	// Roleset: make three viewers tenants of two or more roles each (demo groups: alice emea,
	// bob apac, devon analysts; roles sales_emea g/emea, sales_apac g/apac, sales_all
	// g/analysts), so each is handed a wm_set_ login:
	//   alice: emea, analysts        -> {sales_all, sales_emea}
	//   bob:   emea, apac, analysts  -> {sales_all, sales_apac, sales_emea}
	//   devon: apac, analysts        -> {sales_all, sales_apac}
	ws := policyv1.NewWorkspaceServiceClient(polA)
	for name, members := range map[string][]string{
		"emea": {"alice", "bob"}, "apac": {"bob", "devon"}, "analysts": {"devon", "alice", "bob"},
	} {
		_, err := ws.UpsertGroup(ada, &policyv1.UpsertGroupRequest{Workspace: "demo", Name: name, Members: members})
		require.NoError(t, err, "group %s", name)
	}
	run, err := policyv1.NewRunServiceClient(polA).RecordRun(repBearer(ctx, st.Token(t, "service-token")),
		&policyv1.RecordRunRequest{Workspace: "demo", JobId: repJobID(t), PermissionedAs: "u/devon",
			Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: st.Token(t, "devon-token")})
	require.NoError(t, err)
	jobs := map[string]string{"alice": st.Token(t, "job-alice"), "bob": st.Token(t, "job-bob"), "devon": run.GetJobToken()}
	wantSet := map[string][]string{
		"alice": {"sales_all", "sales_emea"},
		"bob":   {"sales_all", "sales_apac", "sales_emea"},
		"devon": {"sales_all", "sales_apac"},
	}
	list, err := rolesetv1.NewRoleServiceClient(rsA).ListRoles(admin, &rolesetv1.ListRolesRequest{ClusterId: "local"})
	require.NoError(t, err)
	roleID := map[string]string{}
	for _, r := range list.GetRoles() {
		roleID[r.GetName()] = r.GetRoleId()
	}
	require.Contains(t, roleID, "sales_emea")

	rolesA, rolesB := rolesetv1.NewRoleServiceClient(rsA), rolesetv1.NewRoleServiceClient(rsB)
	connA, connB := rolesetv1.NewConnectionServiceClient(rsA), rolesetv1.NewConnectionServiceClient(rsB)
	// These cases are about set logins across replicas (their names, retires and sweeps).
	directMode(admin, t, st, rolesetv1.NewDatatableServiceClient(rsA))
	resolve := func(c rolesetv1.ConnectionServiceClient, viewer string) (*rolesetv1.ResolveConnectionResponse, error) {
		return c.ResolveConnection(repBearer(ctx, jobs[viewer]), &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main?as=viewer"})
	}
	// setLogin waits (bounded) until replica c hands viewer a set login of exactly its roles
	// that logs in: policy's group changes reach roleset's tenancy cache through policy's
	// stream, and a login just dropped may still be in c's cache until roleset's own event.
	setLogin := func(t *testing.T, c rolesetv1.ConnectionServiceClient, viewer string) *rolesetv1.ResolveConnectionResponse {
		t.Helper()
		var got *rolesetv1.ResolveConnectionResponse
		repPoll(t, 10*time.Second, func() (bool, string) {
			r, err := resolve(c, viewer)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", viewer, err)
			}
			if r.GetKind() != rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET || !strings.HasPrefix(r.GetUser(), "wm_set_") ||
				!slices.Equal(repSorted(r.GetRoles()), wantSet[viewer]) {
				return false, fmt.Sprintf("%s: %s %s %v", viewer, r.GetKind(), r.GetUser(), r.GetRoles())
			}
			if err := repCanLogin(ctx, r); err != nil {
				return false, fmt.Sprintf("%s: %s does not log in: %v", viewer, r.GetUser(), err)
			}
			got = r
			return true, ""
		})
		return got
	}
	su, err := pgx.Connect(ctx, st.SuperuserURL(t, "millwright_roleset"))
	require.NoError(t, err)
	defer su.Close(context.Background())
	logins := func(t *testing.T) (rows, roles []string) {
		t.Helper()
		rs, err := su.Query(ctx, `SELECT login FROM datatable_role_set ORDER BY login`)
		require.NoError(t, err)
		rows, err = pgx.CollectRows(rs, pgx.RowTo[string])
		require.NoError(t, err)
		rs, err = su.Query(ctx, `SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'wm\_set\_%' ORDER BY rolname`)
		require.NoError(t, err)
		roles, err = pgx.CollectRows(rs, pgx.RowTo[string])
		require.NoError(t, err)
		return rows, roles
	}

	t.Run("role disabled through roleset A: B stops handing out every set login holding it", func(t *testing.T) {
		sets := map[string]*rolesetv1.ResolveConnectionResponse{}
		for _, v := range []string{"alice", "bob", "devon"} {
			sets[v] = setLogin(t, connB, v)
		}
		require.NotEqual(t, sets["alice"].GetUser(), sets["bob"].GetUser())
		require.NotEqual(t, sets["bob"].GetUser(), sets["devon"].GetUser())
		// An open session on alice's login, to see it ended with the login.
		open, err := pgx.Connect(ctx, repLoginURL(sets["alice"]))
		require.NoError(t, err)
		defer open.Close(context.Background())

		resp, err := rolesA.UpdateRole(admin, &rolesetv1.UpdateRoleRequest{RoleId: roleID["sales_emea"], Enabled: repPtr(false)})
		require.NoError(t, err)
		require.False(t, resp.GetRole().GetEnabled())
		start := time.Now()

		// B stops handing out alice's and bob's logins (both hold sales_emea): each viewer now
		// gets what is left of their roles; devon's login holds no sales_emea and is untouched.
		repPoll(t, 5*time.Second, func() (bool, string) {
			a, err := resolve(connB, "alice")
			if err != nil || a.GetUser() == sets["alice"].GetUser() {
				return false, fmt.Sprintf("alice: %s %v", a.GetUser(), err)
			}
			b, err := resolve(connB, "bob")
			if err != nil || b.GetUser() == sets["bob"].GetUser() {
				return false, fmt.Sprintf("bob: %s %v", b.GetUser(), err)
			}
			return true, ""
		})
		t.Logf("B stopped handing out the retired logins %v after A's UpdateRole returned", time.Since(start))
		a, err := resolve(connB, "alice")
		require.NoError(t, err)
		require.Equal(t, []string{"sales_all"}, a.GetRoles(), "alice keeps her enabled role")
		require.Equal(t, rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, a.GetKind())
		bob, err := resolve(connB, "bob")
		require.NoError(t, err)
		require.Equal(t, []string{"sales_all", "sales_apac"}, repSorted(bob.GetRoles()))
		require.NotContains(t, []string{sets["alice"].GetUser(), sets["bob"].GetUser()}, bob.GetUser())
		for _, c := range []rolesetv1.ConnectionServiceClient{connA, connB} {
			d, err := resolve(c, "devon")
			require.NoError(t, err)
			require.Equal(t, sets["devon"].GetUser(), d.GetUser(), "devon's login holds no disabled role")
			require.Equal(t, sets["devon"].GetPassword(), d.GetPassword())
		}
		require.NoError(t, repCanLogin(ctx, sets["devon"]), "a login not holding the role still works")

		// The retired logins are gone: no row, no role on the cluster, no login, no session.
		rows, roles := logins(t)
		for _, v := range []string{"alice", "bob"} {
			require.NotContains(t, rows, sets[v].GetUser())
			require.NotContains(t, roles, sets[v].GetUser())
			require.Error(t, repCanLogin(ctx, sets[v]), "%s's retired login must not authenticate", v)
		}
		require.Contains(t, roles, sets["devon"].GetUser())
		repPoll(t, 2*time.Second, func() (bool, string) {
			_, err := open.Exec(ctx, `SELECT 1`)
			return err != nil, "the session on the retired login is still open"
		})
	})

	t.Run("sweep on both roleset replicas at once drops each stale login exactly once", func(t *testing.T) {
		_, err := rolesA.UpdateRole(admin, &rolesetv1.UpdateRoleRequest{RoleId: roleID["sales_emea"], Enabled: repPtr(true)})
		require.NoError(t, err)
		// A few rounds, so that the two sweeps get several chances to race over the same rows.
		for round := range 3 {
			// alice's and bob's logins are made stale (unused for 31 days), devon's stays fresh.
			stale := []*rolesetv1.ResolveConnectionResponse{setLogin(t, connA, "alice"), setLogin(t, connB, "bob")}
			fresh := setLogin(t, connA, "devon")
			rowsBefore, rolesBefore := logins(t)
			staleNames := []string{stale[0].GetUser(), stale[1].GetUser()}
			for _, n := range append([]string{fresh.GetUser()}, staleNames...) {
				require.Contains(t, rowsBefore, n)
				require.Contains(t, rolesBefore, n)
			}
			tag, err := su.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '31 days'
				WHERE login = ANY($1)`, staleNames)
			require.NoError(t, err)
			require.EqualValues(t, 2, tag.RowsAffected())

			var wg sync.WaitGroup
			results := make([]*rolesetv1.SweepResponse, 2)
			errs := make([]error, 2)
			begin := make(chan struct{})
			for i, c := range []rolesetv1.RoleServiceClient{rolesA, rolesB} {
				wg.Go(func() {
					<-begin
					results[i], errs[i] = c.Sweep(admin, &rolesetv1.SweepRequest{})
				})
			}
			close(begin)
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			t.Logf("round %d: A dropped %d, B dropped %d", round, results[0].GetDropped(), results[1].GetDropped())
			require.EqualValues(t, len(staleNames), results[0].GetDropped()+results[1].GetDropped(),
				"each stale login dropped exactly once across both replicas")
			require.Zero(t, results[0].GetResumed()+results[1].GetResumed(), "no interrupted retire to finish")

			// Exactly the stale logins are gone, from the catalog and the cluster.
			rowsAfter, rolesAfter := logins(t)
			require.Equal(t, repWithout(rowsBefore, staleNames), rowsAfter)
			require.Equal(t, repWithout(rolesBefore, staleNames), rolesAfter)
			var journal int
			require.NoError(t, su.QueryRow(ctx, `SELECT count(*) FROM datatable_role_set_retiring`).Scan(&journal))
			require.Zero(t, journal, "the retire journal is empty once the sweep is done")
			for _, s := range stale {
				require.Error(t, repCanLogin(ctx, s), "swept login %s must not authenticate", s.GetUser())
			}
			require.NoError(t, repCanLogin(ctx, fresh), "the fresh login must survive the sweep")
		}
	})
}

// replicasB are the addresses of the second replica of each service.
type replicasB struct {
	policy, roleset, billing string
	metrics                  []string // /metrics of policy, roleset and billing
}

// startReplicasB starts replica B of policy, roleset and billing from the stack's binaries on
// the stack's databases, with the environment scripts/run.sh gives its services (tokens,
// encryption key, set secret, instance id) but pointing at each other, and waits until all
// three are SERVING. They are stopped at cleanup (before the stack: cleanups run last first).
func startReplicasB(t *testing.T, st *Stack) replicasB {
	t.Helper()
	ports := freePorts(t, 6)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	b := replicasB{policy: addr(0), roleset: addr(1), billing: addr(2), metrics: []string{addr(3), addr(4), addr(5)}}

	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "MILLWRIGHT_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"MILLWRIGHT_ADMIN_TOKEN="+st.AdminToken(t), "MILLWRIGHT_SERVICE_TOKEN="+st.Token(t, "service-token"),
		"MILLWRIGHT_ENCRYPTION_KEY="+st.Token(t, "encryption-key"),
		"MILLWRIGHT_INSTANCE_ID=local",
		"MILLWRIGHT_POLICY_ADDR="+b.policy, "MILLWRIGHT_ROLESET_ADDR="+b.roleset, "MILLWRIGHT_BILLING_ADDR="+b.billing)

	logDir := t.TempDir()
	type proc struct {
		name, log string
		cmd       *exec.Cmd
		done      chan error
	}
	var procs []*proc
	t.Cleanup(func() {
		// SIGTERM all at once (each waits for its in-flight calls and streams), then SIGKILL
		// whatever has not exited within the bound.
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		deadline := time.After(20 * time.Second)
		for _, p := range procs {
			select {
			case <-p.done:
			case <-deadline:
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			for _, p := range procs {
				out, _ := os.ReadFile(p.log)
				t.Logf("%s B log:\n%s", p.name, tail(string(out), 3000))
			}
		}
	})
	for i, svc := range []string{"policy", "roleset", "billing"} {
		p := &proc{name: svc, log: filepath.Join(logDir, svc+".log"), done: make(chan error, 1)}
		logf, err := os.Create(p.log)
		require.NoError(t, err)
		p.cmd = exec.Command(st.Bin(svc), "serve", "--grpc-addr", addr(i), "--metrics-addr", addr(3+i))
		// The database URL (with its password) in the environment, as run.sh does.
		p.cmd.Env = append(append([]string{}, env...), "DATABASE_URL="+st.SuperuserURL(t, "millwright_"+svc))
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, p.cmd.Start())
		procs = append(procs, p)
		go func() { p.done <- p.cmd.Wait(); logf.Close() }()
	}

	for i, p := range procs {
		cc, err := grpc.NewClient(addr(i), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		deadline := time.Now().Add(60 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			h, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			select {
			case err := <-p.done:
				p.done <- err // for the cleanup
				out, _ := os.ReadFile(p.log)
				t.Fatalf("%s B exited before serving (%v):\n%s", p.name, err, tail(string(out), 3000))
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s B not SERVING within 60s (last: %v %v)", p.name, h.GetStatus(), err)
			}
		}
		_ = cc.Close()
	}
	return b
}

// freePortsN returns n distinct ports that were free a moment ago.
// poll calls cond every 10 ms until it holds, failing the test with cond's last description
// once d has passed.
func repPoll(t *testing.T, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func repBearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// builderOff says whether err is policy's refusal for builder rights being off.
func repBuilderOff(err error) bool {
	reason, _ := errs.Reason(err)
	return status.Code(err) == codes.PermissionDenied && reason == commonv1.ErrorReason_ERROR_REASON_BUILDER_RIGHTS_OFF
}

// loginURL is the connection ResolveConnection handed out, as a pgx URL.
func repLoginURL(c *rolesetv1.ResolveConnectionResponse) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(c.GetUser(), c.GetPassword()),
		Host: net.JoinHostPort(c.GetHost(), strconv.Itoa(int(c.GetPort()))), Path: "/" + c.GetDatabase(),
		RawQuery: "sslmode=disable&connect_timeout=5"}
	return u.String()
}

// canLogin logs in with exactly what ResolveConnection returned and checks who it is.
func repCanLogin(ctx context.Context, c *rolesetv1.ResolveConnectionResponse) error {
	conn, err := pgx.Connect(ctx, repLoginURL(c))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var who string
	if err := conn.QueryRow(ctx, `SELECT current_user`).Scan(&who); err != nil {
		return err
	}
	if who != c.GetUser() {
		return fmt.Errorf("logged in as %s, want %s", who, c.GetUser())
	}
	return nil
}

func repSorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// without returns list minus the names in drop, keeping its order.
func repWithout(list, drop []string) []string {
	out := []string{}
	for _, s := range list {
		if !slices.Contains(drop, s) {
			out = append(out, s)
		}
	}
	return out
}

func repPtr[T any](v T) *T { return &v }

func repJobID(t *testing.T) string {
	var b [16]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
