package itest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/failpoint"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/roleset/internal/app"
	"github.com/millwright/millwright/services/roleset/internal/store"
)

// TestChaosKills is docs/reliability.md, "Process kills at named failpoints": the real roleset
// binary of the fault build (-tags failpoints), on real Postgres and a real target cluster,
// is started armed with a failpoint picked at random from app.Failpoints, driven through a
// workload that passes every failpoint (set logins made, touched, taken back, retired and
// swept; roles created, disabled, enabled and deleted; proxy tickets issued, used and revoked
// by the re-judge; events of both streams), SIGKILLed by the failpoint, restarted unarmed, and
// then the invariants are checked (checkChaos). MILLWRIGHT_CHAOS_CYCLES cycles (make chaos:
// 1,000; make test: 50, about 2 minutes).
func TestChaosKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fault build of roleset and kills it")
	}
	cycles := chaosCycles(t)
	f := newFixture(t, 1)
	p := &chaosProc{bin: servicetest.Build(t, "./services/roleset/cmd/roleset", "-tags=failpoints"),
		addr: servicetest.FreeAddr(t), proxy: servicetest.FreeAddr(t)}
	p.env = append(os.Environ(), "DATABASE_URL="+f.svcDSN, "MILLWRIGHT_ENCRYPTION_KEY="+f.keySpec,
		"MILLWRIGHT_ADMIN_TOKEN="+adminToken, "MILLWRIGHT_AUDIT_KEY="+randHex(32))
	p.args = []string{"serve", "--grpc-addr", p.addr, "--metrics-addr", "", "--log-level", "error",
		"--instance-id", f.instance, "--policy-addr", f.policyAddr, "--proxy-addr", p.proxy,
		"--sweep-interval", "150ms", "--scram-iterations", "4096", "--shutdown-timeout", "1s"}
	t.Cleanup(p.stop)

	// A second data table over the same cluster, in proxy mode: its resolves issue tickets.
	_, err := f.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: "px",
		ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass,
		DefaultRole: "$none", ViewerAccess: proto.Bool(true), CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY})
	require.NoError(t, err)
	_, err = f.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "ws", Name: "px",
		DefaultRole: f.emea.GetRoleId(), Roles: map[string]*rolesetv1.Tenants{
			f.emea.GetRoleId(): {Tenants: []string{"g/emea"}}, f.apac.GetRoleId(): {Tenants: []string{"g/apac"}}}})
	require.NoError(t, err)
	// One viewer per set of two or more roles: every set login the fixture can have.
	for _, m := range []member{{Email: "gina@x", Username: "gina", Groups: []string{"emea", "amer"}},
		{Email: "hal@x", Username: "hal", Groups: []string{"apac", "amer"}},
		{Email: "ivy@x", Username: "ivy", Groups: []string{"emea", "apac", "amer"}}} {
		f.policy.setMember(m)
	}

	p.start(t, "")
	fol := followRoleset(t, f, p)
	counts := map[string][2]int{} // failpoint -> {armed, fired}
	var recovery []time.Duration
	for i := range cycles {
		fp := app.Failpoints[rand.IntN(len(app.Failpoints))]
		t.Logf("cycle %d: %s", i, fp)
		p.stop()
		p.start(t, fp)
		f.chaosWorkload(t, p, i)
		fired := p.waitKilled(500 * time.Millisecond)
		c := counts[fp]
		c[0]++
		if fired {
			c[1]++
		}
		counts[fp] = c
		p.stop()
		start := time.Now()
		p.start(t, "")
		recovery = append(recovery, p.firstResolve(t, f, start))
		f.checkChaos(t, p, fol)
		if (i+1)%100 == 0 && i+1 < cycles { // figures so far, for a long run stopped early
			reportChaos(t, i+1, counts, recovery)
		}
	}
	reportChaos(t, cycles, counts, recovery)
}

// chaosCycles is MILLWRIGHT_CHAOS_CYCLES (make chaos), else 50.
func chaosCycles(t *testing.T) int {
	if v := os.Getenv("MILLWRIGHT_CHAOS_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return 50
}

// chaosProc is the roleset process under test: one at a time, on the same addresses and
// database, as a supervisor restarts a crashed service.
type chaosProc struct {
	bin, addr, proxy string
	env, args        []string
	cmd              *exec.Cmd
	exited           chan struct{}
	cc               *grpc.ClientConn
}

// start runs the binary, armed with failpoint fp ("" none), and waits until it serves or
// (armed) exits.
func (p *chaosProc) start(t *testing.T, fp string) {
	t.Helper()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(slices.Clip(p.env), failpoint.EnvVar+"="+fp)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	p.cmd, p.exited = cmd, make(chan struct{})
	exited := p.exited
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	if p.cc == nil {
		// Reconnect at once to the restarted process: the default backoff grows to minutes,
		// and a call fails fast with the last connection error meanwhile.
		cc, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
				Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.5, MaxDelay: 50 * time.Millisecond}}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cc.Close() })
		p.cc = cc
	}
	if fp == "" {
		servicetest.WaitServing(t, p.addr, exited, func() error { return waitErr })
		return
	}
	// Armed: it may die before serving (a failpoint on the start-up path); that is a hit too.
	require.Eventually(t, func() bool {
		if p.dead() {
			return true
		}
		_, err := rolesetv1.NewRoleServiceClient(p.cc).ListRoles(adminCtx(), &rolesetv1.ListRolesRequest{ClusterId: "none"})
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
}

func (p *chaosProc) dead() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitKilled waits up to d for the process to end and reports whether a SIGKILL ended it:
// its failpoint fired (nothing else kills it).
func (p *chaosProc) waitKilled(d time.Duration) bool {
	select {
	case <-p.exited:
	case <-time.After(d):
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// stop kills the process if it runs (SIGKILL: a crash) and waits for it.
func (p *chaosProc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

func (p *chaosProc) conns() rolesetv1.ConnectionServiceClient {
	return rolesetv1.NewConnectionServiceClient(p.cc)
}

func (p *chaosProc) roles() rolesetv1.RoleServiceClient { return rolesetv1.NewRoleServiceClient(p.cc) }

// firstResolve resolves until the restarted process answers a decision it has not cached
// (a new run of carol's) and returns how long after since it first did.
func (p *chaosProc) firstResolve(t *testing.T, f *fixture, since time.Time) time.Duration {
	t.Helper()
	tok := f.viewerRun("carol@x")
	require.Eventually(t, func() bool {
		_, err := p.conns().ResolveConnection(bearerCtx(tok), &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main?as=viewer"})
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the restarted roleset does not resolve")
	return time.Since(since)
}

// chaosWorkload drives the armed process through every failpoint, in an order where each is
// reached once the ones before it did not fire; it stops when the process is dead. Its calls
// may fail (the process dies under them): what matters is what the invariants find after.
func (f *fixture) chaosWorkload(t *testing.T, p *chaosProc, cycle int) {
	t.Helper()
	ctx := context.Background()
	call := func(fn func(ctx context.Context) error) bool {
		if p.dead() {
			return false
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = fn(cctx)
		return !p.dead()
	}
	resolve := func(viewer, ref string) (*rolesetv1.ResolveConnectionResponse, string) {
		tok := f.viewerRun(viewer)
		var c *rolesetv1.ResolveConnectionResponse
		call(func(ctx context.Context) error {
			var err error
			c, err = p.conns().ResolveConnection(metadataCtx(ctx, tok), &rolesetv1.ResolveConnectionRequest{Reference: ref})
			return err
		})
		return c, tok
	}
	// An event of policy's: the follower receives and applies it.
	f.policy.setMember(member{Email: "alice@x", Username: "alice", Groups: []string{"emea"}})
	// Take-back: carol's login loses its row (as a crash before the row's commit leaves it).
	_, err := f.r.pool.Exec(ctx, `DELETE FROM datatable_role_set WHERE login = $1`, f.setLogin(t, f.emea.GetOid(), f.apac.GetOid()))
	require.NoError(t, err)
	// Touch: gina's row is older than the touch interval.
	_, err = f.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '2 days' WHERE login = $1`,
		f.setLogin(t, f.emea.GetOid(), f.amer.GetOid()))
	require.NoError(t, err)
	for _, v := range []string{"carol@x", "gina@x", "hal@x", "ivy@x", "alice@x"} {
		if resolve(v, "datatable://main?as=viewer"); p.dead() {
			return
		}
	}
	// A role created, disabled (its set logins retired), enabled and deleted.
	name := fmt.Sprintf("chaos_%s_%d", f.instance[5:], cycle)
	var role *rolesetv1.Role
	if !call(func(ctx context.Context) error {
		r, err := p.roles().CreateRole(metadataCtx(ctx, adminToken), &rolesetv1.CreateRoleRequest{ClusterId: f.clusterID, Name: name})
		role = r.GetRole()
		return err
	}) {
		return
	}
	for _, enabled := range []bool{false, true} {
		if !call(func(ctx context.Context) error {
			_, err := p.roles().UpdateRole(metadataCtx(ctx, adminToken), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: proto.Bool(enabled)})
			return err
		}) {
			return
		}
	}
	if role != nil && !call(func(ctx context.Context) error {
		_, err := p.roles().DeleteRole(metadataCtx(ctx, adminToken), &rolesetv1.DeleteRoleRequest{RoleId: role.GetRoleId()})
		return err
	}) {
		return
	}
	// A ticket issued, a session through the proxy, then the run finished: the re-judge
	// revokes the ticket and closes the session.
	c, tok := resolve("carol@x", "datatable://px?as=viewer")
	if p.dead() || c == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a session cut mid-handshake must not hang the test
	defer cancel()
	if conn, err := pgx.Connect(sctx, loginDSN(c.GetHost(), int(c.GetPort()), c.GetUser(), c.GetPassword(), c.GetDatabase())); err == nil {
		defer conn.Close(ctx)
		f.policy.finish(tok)
		deadline := time.Now().Add(2 * time.Second)
		for !p.dead() && time.Now().Before(deadline) && conn.Ping(sctx) == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if p.dead() {
		return
	}
	// The sweep: an interrupted retire in the journal, and every set login unused for long.
	if login := f.setLogin(t, f.apac.GetOid(), f.amer.GetOid()); true {
		lock, ok, err := store.New(f.r.pool).LockLogin(ctx, f.clusterID, login, false)
		require.NoError(t, err)
		if ok {
			_, err = lock.MoveToJournal(ctx, f.instance, "chaos", nil)
			lock.Unlock()
			require.NoError(t, err)
		}
	}
	_, err = f.r.pool.Exec(ctx, `UPDATE datatable_role_set SET last_used_at = now() - interval '40 days'`)
	require.NoError(t, err)
	deadline := time.Now().Add(time.Second)
	for !p.dead() && time.Now().Before(deadline) {
		var n int
		require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM datatable_role_set) + (SELECT count(*) FROM datatable_role_set_retiring)`).Scan(&n))
		if n == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkChaos runs the reconciler (a sweep), then the next use of every set login, and asserts
// the invariants of docs/reliability.md section 1 on what the killed process left.
func (f *fixture) checkChaos(t *testing.T, p *chaosProc, fol *chaosFollower) {
	t.Helper()
	ctx := context.Background()
	// What a client does after a failed call: retry it. apac enabled again; the cycle's
	// role, if a crash left it half made or half deleted, created and deleted again. These
	// race the restarted process's own reconciler on the same roles: never Internal
	// (TestRoleChangeRace).
	_, err := p.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: f.apac.GetRoleId(), Enabled: proto.Bool(true)})
	require.NoError(t, err)
	rows, err := f.r.pool.Query(ctx, `SELECT name FROM datatable_role WHERE name LIKE 'chaos\_%'`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, name := range left {
		r, err := p.roles().CreateRole(adminCtx(), &rolesetv1.CreateRoleRequest{ClusterId: f.clusterID, Name: name})
		if reasonOf(err) == commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS {
			// Ready, or being deleted: the reconciler finishes a deletion.
			continue
		}
		require.NoError(t, err, "retrying the creation of %s", name)
		_, err = p.roles().DeleteRole(adminCtx(), &rolesetv1.DeleteRoleRequest{RoleId: r.GetRole().GetRoleId()})
		require.NoError(t, err)
	}
	// The reconciler (the restarted process sweeps every 150 ms too; sweeps are safe at once).
	f.r.eng.DropCaches()
	_, err = f.r.eng.Sweep(ctx)
	require.NoError(t, err)
	rows, err = f.r.pool.Query(ctx, `SELECT id FROM datatable_role WHERE name LIKE 'chaos\_%' AND state = 'ready'`)
	require.NoError(t, err)
	ready, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	for _, id := range ready {
		_, err := p.roles().DeleteRole(adminCtx(), &rolesetv1.DeleteRoleRequest{RoleId: strconv.FormatInt(id, 10)})
		require.NoError(t, err)
	}

	// The next use of every set login (and a sweep after it: a use may find the journal).
	for _, v := range []string{"carol@x", "gina@x", "hal@x", "ivy@x"} {
		c, err := f.resolve(f.r, f.viewerRun(v), "datatable://main?as=viewer")
		require.NoError(t, err, v)
		require.NoError(t, f.canLogin(c.GetUser(), c.GetPassword()), v)
	}
	_, err = f.r.eng.Sweep(ctx)
	require.NoError(t, err)

	// 1. Every row names a login that authenticates with the stored secret.
	f.checkRows(t)
	// 2. No login without a row survives its next use: every wm_set_ login holding a
	// fixture role has its row, and the retire journal is empty.
	oids := []int64{int64(f.emea.GetOid()), int64(f.apac.GetOid()), int64(f.amer.GetOid())}
	super, err := pgx.Connect(ctx, f.superDSN)
	require.NoError(t, err)
	defer super.Close(ctx)
	crows, err := super.Query(ctx, `SELECT DISTINCT r.rolname FROM pg_roles r JOIN pg_auth_members m ON m.member = r.oid
		WHERE r.rolname LIKE 'wm\_set\_%' AND m.roleid = ANY($1) ORDER BY 1`, oids)
	require.NoError(t, err)
	onCluster, err := pgx.CollectRows(crows, pgx.RowTo[string])
	require.NoError(t, err)
	rows2, err := f.r.pool.Query(ctx, `SELECT login FROM datatable_role_set ORDER BY 1`)
	require.NoError(t, err)
	withRow, err := pgx.CollectRows(rows2, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, withRow, onCluster, "set logins on the cluster = set logins with a row")
	var journal int
	require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT count(*) FROM datatable_role_set_retiring`).Scan(&journal))
	require.Zero(t, journal, "retire journal left after the reconciler")
	// 3. No catalog role without its cluster role, no cluster role of ours without its row.
	rows3, err := f.r.pool.Query(ctx, `SELECT oid, name, state FROM datatable_role WHERE cluster_id = $1 ORDER BY name`, f.clusterID)
	require.NoError(t, err)
	type catRole struct {
		oid         int64
		name, state string
	}
	catalog, err := pgx.CollectRows(rows3, func(r pgx.CollectableRow) (catRole, error) {
		var c catRole
		return c, r.Scan(&c.oid, &c.name, &c.state)
	})
	require.NoError(t, err)
	for _, c := range catalog {
		require.Equal(t, "ready", c.state, "role %s left %s after the reconciler", c.name, c.state)
		var name string
		require.NoError(t, super.QueryRow(ctx, `SELECT coalesce((SELECT rolname FROM pg_roles WHERE oid = $1), '')`, c.oid).Scan(&name))
		require.Equal(t, c.name, name, "catalog role %s has no cluster role", c.name)
	}
	crows, err = super.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname LIKE $1`, "chaos\\_"+f.instance[5:]+"\\_%")
	require.NoError(t, err)
	stray, err := pgx.CollectRows(crows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, stray, "cluster roles of ours without their row")
	// 4. The stream: a follower of the process's Watch, across every kill, received each
	// committed event exactly once, in order.
	fol.check(t, f)
}

// chaosFollower follows the roleset process's Watch across its restarts (pkg/stream's Follow,
// its position kept here) and records every id it applied.
type chaosFollower struct {
	mu    sync.Mutex
	start int64
	ids   []int64
}

func followRoleset(t *testing.T, f *fixture, p *chaosProc) *chaosFollower {
	ctx, cancel := context.WithCancel(context.Background())
	head, err := stream.Head(ctx, f.r.pool)
	require.NoError(t, err)
	fol := &chaosFollower{start: head}
	events := rolesetv1.NewEventServiceClient(p.cc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = stream.Follow(ctx, stream.FollowOptions{
			Open: func(ctx context.Context, after int64) (stream.Receiver, error) {
				w, err := events.Watch(metadataCtx(ctx, adminToken), &rolesetv1.WatchRequest{AfterId: after})
				return rolesetReceiver{w}, err
			},
			After: func(context.Context) (int64, error) { fol.mu.Lock(); defer fol.mu.Unlock(); return fol.last(), nil },
			Apply: func(_ context.Context, e stream.Event) error {
				fol.mu.Lock()
				defer fol.mu.Unlock()
				fol.ids = append(fol.ids, e.ID)
				return nil
			},
			Resync: func(context.Context) (int64, error) {
				return 0, errors.New("resync: the follower fell behind retention")
			},
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return fol
}

// metadataCtx is ctx with token as the bearer of its outgoing calls.
func metadataCtx(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func (c *chaosFollower) last() int64 {
	if len(c.ids) == 0 {
		return c.start
	}
	return c.ids[len(c.ids)-1]
}

// check waits until the follower reached the outbox's newest id, then requires its ids to be
// exactly the outbox's ids after where it started: no gap, no duplicate, in order.
func (c *chaosFollower) check(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	var newest int64
	require.NoError(t, f.r.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM stream_outbox`).Scan(&newest))
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.last() >= newest },
		15*time.Second, 10*time.Millisecond, "the follower did not reach the stream's head %d", newest)
	rows, err := f.r.pool.Query(ctx, `SELECT id FROM stream_outbox WHERE id > $1 AND id <= $2 ORDER BY id`, c.start, newest)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.ids[:len(want)]
	if len(c.ids) < len(want) {
		got = c.ids
	}
	if !slices.Equal(want, got) {
		rows, err := f.r.pool.Query(ctx, `SELECT id || ' ' || kind || ' ' || op || ' ' || key FROM stream_outbox WHERE id > $1 ORDER BY id`, c.start)
		require.NoError(t, err)
		kinds, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, want, got, "the follower's ids are not the committed ones (gap, duplicate or order); outbox: %v", kinds)
	}
}

type rolesetReceiver struct {
	w grpc.ServerStreamingClient[rolesetv1.WatchResponse]
}

func (r rolesetReceiver) Recv() (*commonv1.Event, int64, error) {
	m, err := r.w.Recv()
	if err != nil {
		return nil, 0, err
	}
	return m.GetEvent(), m.GetHeadId(), nil
}

// reportChaos logs the figures of docs/reliability.md: per failpoint, how often it was armed
// and fired, and the recovery time (restart to first new decision), median and max.
func reportChaos(t *testing.T, cycles int, counts map[string][2]int, recovery []time.Duration) {
	names := make([]string, 0, len(counts))
	fired := 0
	for n, c := range counts {
		names = append(names, n)
		fired += c[1]
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "FIGURES cycles=%d fired=%d violations=0\n", cycles, fired)
	for _, n := range names {
		fmt.Fprintf(&b, "FIGURES | %s | %d | %d |\n", n, counts[n][0], counts[n][1])
	}
	for _, n := range app.Failpoints {
		if _, ok := counts[n]; !ok {
			fmt.Fprintf(&b, "FIGURES | %s | 0 | 0 |\n", n)
		}
	}
	slices.Sort(recovery)
	if len(recovery) > 0 {
		fmt.Fprintf(&b, "FIGURES recovery median=%v max=%v\n", recovery[len(recovery)/2].Round(time.Millisecond),
			recovery[len(recovery)-1].Round(time.Millisecond))
	}
	t.Log("\n" + b.String())
}
