package itest

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/audit"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/app"
	"github.com/millwright/millwright/services/roleset/internal/engine"
	"github.com/millwright/millwright/services/roleset/internal/store"
)

// startProxied starts a replica that runs the PostgreSQL proxy, wired as the roleset app wires
// it (app.NewProxy, app.Rejudge).
func (e *env) startProxied() *replica { return e.startProxiedWith(0, 0) }

// startProxiedWith is startProxied with a ticket lifetime and a re-judging period (0: the
// defaults).
func (e *env) startProxiedWith(lifetime, rejudgeEvery time.Duration) *replica {
	t := e.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	r := e.start(func(c *engine.Config) {
		c.Proxy = engine.ProxyConfig{Host: "127.0.0.1", Port: port, TicketLifetime: lifetime}
	})
	r.proxyPort = port
	px := app.NewProxy(r.eng, store.New(r.pool), nil, slog.Default(), r.rec)
	r.proxy = px
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = px.Serve(ln); done <- struct{}{} }()
	go func() { _ = app.Rejudge(ctx, r.eng, px, slog.Default(), &r.rejudged, rejudgeEvery); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		_ = px.Close()
		<-done
		<-done
	})
	return r
}

// proxyMode puts the fixture's data table main in proxy mode.
func (f *fixture) proxyMode(t *testing.T, r *replica) {
	t.Helper()
	res, err := r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: "main",
		ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass,
		DefaultRole: f.emea.GetRoleId(), ViewerAccess: proto.Bool(true),
		CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY})
	require.NoError(t, err)
	require.Equal(t, rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY, res.GetDatatable().GetCredentialMode())
}

// session opens a connection through the proxy with c and returns it with its upstream
// backend's pid (pg_backend_pid runs upstream).
func session(t *testing.T, c *rolesetv1.ResolveConnectionResponse) (*pgx.Conn, int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, loginDSN(c.GetHost(), int(c.GetPort()), c.GetUser(), c.GetPassword(), c.GetDatabase()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	return conn, pid
}

// requireSessionEvent waits for a proxy session event of ticket id that has want's outcome and
// rule, and its object, actor, workspace and details where want sets them; it returns it.
func (f *fixture) requireSessionEvent(t *testing.T, id string, want audit.Event) audit.Event {
	t.Helper()
	var got audit.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, e := range f.auditEvents(t, id) {
			if e.RPC != app.ProxySessionRPC || e.Class != audit.Proxy || e.Outcome != want.Outcome || e.Rule != want.Rule ||
				want.Object != "" && e.Object != want.Object || want.Actor != "" && (e.Actor != want.Actor || e.ActorKind != want.ActorKind) ||
				want.Workspace != "" && e.Workspace != want.Workspace || want.Details != nil && !maps.Equal(e.Details, want.Details) {
				continue
			}
			got = e
			return
		}
		c.Errorf("no proxy session event %+v of ticket %s yet", want, id)
	}, 5*time.Second, 20*time.Millisecond)
	return got
}

// superConn is a superuser connection to the target cluster, to watch pg_stat_activity.
func (f *fixture) superConn(t *testing.T) *pgx.Conn {
	t.Helper()
	super, err := pgx.Connect(context.Background(), f.superDSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = super.Close(context.Background()) })
	return super
}

// requireEnded waits until the session's upstream backend is gone from pg_stat_activity (read
// through super, connected beforehand so that its login is not timed) and the client's
// connection fails, and returns how long that took.
func (f *fixture) requireEnded(t *testing.T, super, conn *pgx.Conn, pid int, since time.Time) time.Duration {
	t.Helper()
	ctx := context.Background()
	var took time.Duration
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		assert.NoError(c, super.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n))
		assert.Zero(c, n, "the upstream backend is gone")
		took = time.Since(since)
	}, 5*time.Second, 2*time.Millisecond)
	_, err := conn.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "the client's session is closed")
	return took
}

// requireEndsOn opens a session with c, makes the change, and requires the session ended
// (backend gone), the ticket refused, and the change seen well inside a second; it logs the
// time from the change to the backend gone.
func (f *fixture) requireEndsOn(t *testing.T, c *rolesetv1.ResolveConnectionResponse, what string, change func()) {
	t.Helper()
	conn, pid := session(t, c)
	super := f.superConn(t)
	start := time.Now()
	change()
	t.Logf("%s -> session and backend gone in %v", what, f.requireEnded(t, super, conn, pid, start))
	require28P01(t, c)
}

func require28P01(t *testing.T, c *rolesetv1.ResolveConnectionResponse) {
	t.Helper()
	_, err := pgx.Connect(context.Background(), loginDSN(c.GetHost(), int(c.GetPort()), c.GetUser(), c.GetPassword(), c.GetDatabase()))
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "28P01", pe.Code)
}

// In proxy mode a job gets a ticket, not a password: it connects through roleset's proxy and
// sees exactly its viewer's rows; the ticket and its open sessions (upstream backends
// included) end when the run ends, when a role of the decision is disabled, and when the
// viewer leaves the group the decision rested on (issue 14).
func TestProxyTickets(t *testing.T) {
	f := newFixture(t, 1)
	px := f.startProxied()
	f.proxyMode(t, px)
	ctx := context.Background()

	t.Run("an unknown credential mode is refused, not read as keep", func(t *testing.T) {
		_, err := px.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: "main",
			ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass,
			DefaultRole: f.emea.GetRoleId(), CredentialMode: rolesetv1.CredentialMode(99)})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, err.Error(), "credential_mode")
	})

	t.Run("a replica without a proxy refuses proxy mode", func(t *testing.T) {
		_, err := f.resolve(f.r, f.viewerRun("alice@x"), "datatable://main?as=viewer")
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.Equal(t, commonv1.ErrorReason_ERROR_REASON_PROXY_NOT_CONFIGURED, reasonOf(err))
	})

	t.Run("a wrong secret costs one ticket read: no decision is taken before the client proves it", func(t *testing.T) {
		c, err := f.resolve(px, f.viewerRun("alice@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		// Forget every run identity (an event of another workspace: no session is judged
		// again), so taking the decision would have to ask policy.
		px.eng.OnPolicyEvent("run", "elsewhere")
		before := f.policy.Calls()
		c.Password += "x"
		require28P01(t, c)
		require.Equal(t, before, f.policy.Calls())
	})

	t.Run("the viewer's rows through the proxy, with a ticket", func(t *testing.T) {
		c, err := f.resolve(px, f.viewerRun("alice@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		require.Equal(t, rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY, c.GetCredentialMode())
		require.Regexp(t, `^t_[a-z2-7]{26}$`, c.GetUser())
		require.Equal(t, []string{f.emea.GetName()}, c.GetRoles())
		got, err := query(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2}, got, "alice sees the EMEA rows only")
		conn, _ := session(t, c)
		var user string
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_user`).Scan(&user))
		require.Equal(t, f.emea.GetName(), user, "upstream, the proxy is the decided login")

		bad := proto.Clone(c).(*rolesetv1.ResolveConnectionResponse)
		bad.Password += "x"
		require28P01(t, bad)

		// The audit trail: the credential names the decided login and the ticket; each
		// session's start (granted, or refused with its SQLSTATE) and end are recorded; the
		// ticket's secret is nowhere.
		resolved := f.auditEvents(t, c.GetUser())[0]
		require.Equal(t, rolesetv1.ConnectionService_ResolveConnection_FullMethodName, resolved.RPC)
		require.Equal(t, map[string]string{"login": f.emea.GetName(), "credential_mode": "PROXY", "ticket": c.GetUser()},
			map[string]string{"login": resolved.Details["login"], "credential_mode": resolved.Details["credential_mode"], "ticket": resolved.Details["ticket"]})
		object := "ticket=" + c.GetUser() + " login=" + f.emea.GetName()
		f.requireSessionEvent(t, c.GetUser(), audit.Event{Outcome: audit.Granted, Object: object, ActorKind: "job", Actor: resolved.Details["job_id"],
			Workspace: "ws", Details: map[string]string{"session": "start", "database": f.targetDB, "data_table": "ws/main"}})
		f.requireSessionEvent(t, c.GetUser(), audit.Event{Outcome: audit.Granted, Object: object, ActorKind: "job", Actor: resolved.Details["job_id"],
			Workspace: "ws", Details: map[string]string{"session": "end", "database": f.targetDB, "data_table": "ws/main", "why": "client closed"}})
		f.requireSessionEvent(t, c.GetUser(), audit.Event{Outcome: audit.Refused, Rule: "28P01", Object: object, ActorKind: "job",
			Actor: resolved.Details["job_id"], Workspace: "ws", Details: map[string]string{"session": "start", "database": f.targetDB, "data_table": "ws/main"}})
		f.requireNotInTrail(t, c.GetPassword())
	})

	t.Run("the admin login through the proxy (a decision that holds no catalog role)", func(t *testing.T) {
		c, err := f.resolve(px, f.policy.run("u/dave", policyv1.RunOrigin_RUN_ORIGIN_DIRECT, "dave@x"), "datatable://main?role=admin")
		require.NoError(t, err)
		require.Equal(t, rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY, c.GetCredentialMode())
		conn, _ := session(t, c)
		var user string
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_user`).Scan(&user))
		require.Equal(t, f.adminUser, user)
	})

	t.Run("the run ends: its sessions end and its ticket is refused", func(t *testing.T) {
		tok := f.viewerRun("alice@x")
		c, err := f.resolve(px, tok, "datatable://main?as=viewer")
		require.NoError(t, err)
		f.requireEndsOn(t, c, "run ended", func() { f.policy.finish(tok) })
		got := f.requireSessionEvent(t, c.GetUser(), audit.Event{Outcome: audit.Refused, Rule: "revoked"})
		require.Equal(t, "end", got.Details["session"])
	})

	t.Run("the run's job token is revoked", func(t *testing.T) {
		tok := f.viewerRun("alice@x")
		c, err := f.resolve(px, tok, "datatable://main?as=viewer")
		require.NoError(t, err)
		f.requireEndsOn(t, c, "job token revoked", func() { f.policy.revoke(tok) })
	})

	t.Run("a role of the decision is disabled", func(t *testing.T) {
		c, err := f.resolve(px, f.viewerRun("bob@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = px.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: proto.Bool(true)})
		})
		f.requireEndsOn(t, c, "role disabled (the disable RPC included)", func() {
			start := time.Now()
			_, err := px.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: proto.Bool(false)})
			require.NoError(t, err)
			t.Logf("the disable RPC itself took %v", time.Since(start))
		})
	})

	t.Run("the data table's permissions change so that the decision would change", func(t *testing.T) {
		c, err := f.resolve(px, f.viewerRun("carol@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		f.requireEndsOn(t, c, "permissions changed", func() {
			_, err := px.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "ws", Name: "main",
				DefaultRole: f.emea.GetRoleId(), Roles: map[string]*rolesetv1.Tenants{
					f.emea.GetRoleId(): {Tenants: []string{"g/emea"}},
					f.apac.GetRoleId(): {Tenants: []string{"u/bob"}}, // g/apac no longer: carol keeps emea only
					f.amer.GetRoleId(): {Tenants: []string{"g/amer", "u/frank"}},
					"admin":            {Tenants: []string{"u/dave", "u/alice"}},
				}})
			require.NoError(t, err)
		})
	})

	t.Run("a cancel request reaches the upstream backend through the proxy", func(t *testing.T) {
		c, err := f.resolve(px, f.viewerRun("bob@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		conn, _ := session(t, c)
		go func() {
			time.Sleep(300 * time.Millisecond)
			// A cancel request on its own connection to the proxy, with the proxy's key.
			_ = conn.PgConn().CancelRequest(context.Background())
		}()
		start := time.Now()
		_, err = conn.Exec(context.Background(), `SELECT pg_sleep(30)`)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "57014", pe.Code, "cancelled upstream (query_canceled), not cut off")
		require.Less(t, time.Since(start), 10*time.Second)
		_, err = conn.Exec(context.Background(), `SELECT 1`)
		require.NoError(t, err, "the session lives on after its query was cancelled")
	})

	t.Run("any replica serves a ticket another replica minted", func(t *testing.T) {
		other := f.startProxied()
		c, err := f.resolve(px, f.viewerRun("bob@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		oc := proto.Clone(c).(*rolesetv1.ResolveConnectionResponse)
		oc.Port = int32(other.proxyPort)
		got, err := query(ctx, oc)
		require.NoError(t, err)
		require.Equal(t, []int{3, 4}, got, "bob sees the APAC rows only")
	})

	t.Run("a viewer removed from a group loses the old set's session", func(t *testing.T) {
		f.policy.setMember(member{Email: "frank@x", Username: "frank", Groups: []string{"emea"}})
		var c *rolesetv1.ResolveConnectionResponse
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var err error
			c, err = f.resolve(px, f.viewerRun("frank@x"), "datatable://main?as=viewer")
			assert.NoError(ct, err)
			assert.Equal(ct, rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, c.GetKind(), "frank: emea (group) + amer (u/frank)")
		}, 5*time.Second, 10*time.Millisecond)
		f.requireEndsOn(t, c, "viewer left g/emea (a set login)", func() {
			f.policy.setMember(member{Email: "frank@x", Username: "frank"})
		})
	})

	t.Run("a proxy that stops ends its sessions; the ticket works through another replica", func(t *testing.T) {
		other := f.startProxied()
		c, err := f.resolve(other, f.viewerRun("bob@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		conn, pid := session(t, c)
		super := f.superConn(t)
		require.NoError(t, other.proxy.Close())
		f.requireEnded(t, super, conn, pid, time.Now())
		c.Port = int32(px.proxyPort)
		got, err := query(ctx, c)
		require.NoError(t, err, "the run is live: its ticket reconnects elsewhere")
		require.Equal(t, []int{3, 4}, got)
	})

	t.Run("a ticket that reaches its lifetime ends its sessions while the run goes on", func(t *testing.T) {
		short := f.startProxiedWith(time.Second, 50*time.Millisecond)
		c, err := f.resolve(short, f.viewerRun("bob@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		conn, pid := session(t, c)
		super := f.superConn(t)
		t.Logf("ticket lifetime 1 s -> session and backend gone %v after the resolve", f.requireEnded(t, super, conn, pid, time.Now()))
		require28P01(t, c)
		n, err := short.eng.DeleteExpiredTickets(ctx, time.Now())
		require.NoError(t, err)
		require.Positive(t, n, "the monitor loop's cleanup removes the expired ticket")
		require28P01(t, c)
	})

	t.Run("tries with unknown tickets are one audit decision, not a write each", func(t *testing.T) {
		// Anyone who reaches the port may try; what they send must not make roleset write
		// per try, nor land in the trail (user names and databases of their choosing).
		c, err := f.resolve(px, f.viewerRun("bob@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		before := len(f.auditEvents(t, `"ticket=unknown"`))
		var tried []string
		for range 5 {
			id := "t_" + strings.Repeat("a", 21) + strings.Repeat("z", 5-len(tried)) + strings.Repeat("b", len(tried))
			tried = append(tried, id)
			_, err := pgx.Connect(ctx, loginDSN(c.GetHost(), int(c.GetPort()), id, "guess", "evil_db"))
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "28P01", pe.Code)
		}
		// One event per repeat window, plus at most the count of a window that ended meanwhile.
		require.LessOrEqual(t, len(f.auditEvents(t, `"ticket=unknown"`))-before, 2,
			"the tries within the repeat window are counted, not written each")
		for _, id := range append(tried, "evil_db") {
			require.Empty(t, f.auditEvents(t, id), "what an anonymous client sent is not in the trail")
		}
	})

	t.Run("the viewer leaves the group the decision rested on", func(t *testing.T) {
		c, err := f.resolve(px, f.viewerRun("alice@x"), "datatable://main?as=viewer")
		require.NoError(t, err)
		f.requireEndsOn(t, c, "viewer left g/emea", func() {
			f.policy.setMember(member{Email: "alice@x", Username: "alice"})
		})
	})

	// The metrics an operator watches: the run-ended, token, permissions and two group cases were
	// ended by re-judging (the role disable may be, or the RPC itself terminates the backend
	// first; a pass counts its sessions once CloseSessions returns, after the backend is gone),
	// and no decision failed to be taken again.
	require.Eventually(t, func() bool { return px.rejudged.Ended.Load() >= 5 }, 5*time.Second, 5*time.Millisecond,
		"sessions ended by re-judging: %d", px.rejudged.Ended.Load())
	require.Zero(t, px.rejudged.Failed.Load())
	require.Positive(t, px.proxy.Stats().Refusals["28P01"], "the refused tickets are counted")
}
