package itest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/roleset/internal/api"
	"github.com/millwright/millwright/services/roleset/internal/app"
	"github.com/millwright/millwright/services/roleset/internal/engine"
	"github.com/millwright/millwright/services/roleset/internal/pgproxy"
	"github.com/millwright/millwright/services/roleset/internal/policyidentity"
	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const adminToken = "test-admin-token"

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- policy stand-in (policy's gRPC contract) ----

type member struct {
	Email    string
	Username string
	Groups   []string
	Admin    bool
}

type fakePolicy struct {
	policyv1.UnimplementedRunServiceServer
	policyv1.UnimplementedWorkspaceServiceServer
	policyv1.UnimplementedEventServiceServer

	mu      sync.Mutex
	runs    map[string]*policyv1.RunIdentity
	members map[string]member // by email
	calls   int
	seq     int64
	subs    []chan *commonv1.Event
}

func newFakePolicy() *fakePolicy {
	return &fakePolicy{runs: map[string]*policyv1.RunIdentity{}, members: map[string]member{}}
}

func (p *fakePolicy) Calls() int { p.mu.Lock(); defer p.mu.Unlock(); return p.calls }

func (p *fakePolicy) GetRunIdentity(ctx context.Context, req *policyv1.GetRunIdentityRequest) (*policyv1.GetRunIdentityResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	r, ok := p.runs[req.GetJobToken()]
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "unknown job token")
	}
	return &policyv1.GetRunIdentityResponse{Run: r}, nil
}

func (p *fakePolicy) ResolveTenancy(ctx context.Context, req *policyv1.ResolveTenancyRequest) (*policyv1.ResolveTenancyResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	m, ok := p.members[req.GetEmail()]
	if req.GetUsername() != "" { // a run's owner, looked up by username
		for _, mm := range p.members {
			if mm.Username == req.GetUsername() {
				m, ok = mm, true
			}
		}
	}
	if !ok {
		return nil, status.Error(codes.NotFound, "not a member")
	}
	return &policyv1.ResolveTenancyResponse{Workspace: req.GetWorkspace(), Username: m.Username, Email: m.Email,
		Groups: m.Groups, IsAdmin: m.Admin}, nil
}

func (p *fakePolicy) Watch(req *policyv1.WatchRequest, srv grpc.ServerStreamingServer[policyv1.WatchResponse]) error {
	ch := make(chan *commonv1.Event, 64)
	p.mu.Lock()
	p.subs = append(p.subs, ch)
	head := p.seq
	p.mu.Unlock()
	// A watcher that went away (its replica killed) stops receiving: emit must not block on
	// its full channel.
	defer func() {
		p.mu.Lock()
		p.subs = slices.DeleteFunc(p.subs, func(c chan *commonv1.Event) bool { return c == ch })
		p.mu.Unlock()
	}()
	if err := srv.Send(&policyv1.WatchResponse{HeadId: head}); err != nil {
		return err
	}
	for {
		select {
		case <-srv.Context().Done():
			return nil
		case e := <-ch:
			if err := srv.Send(&policyv1.WatchResponse{Event: e, HeadId: e.Id}); err != nil {
				return err
			}
		}
	}
}

// emit publishes an event to every watcher.
func (p *fakePolicy) emit(kind, ws, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	for _, ch := range p.subs {
		ch <- &commonv1.Event{Id: p.seq, Kind: kind, Workspace: ws, Key: key, Op: "update"}
	}
}

func (p *fakePolicy) setMember(m member) {
	p.mu.Lock()
	p.members[m.Email] = m
	p.mu.Unlock()
	p.emit("member", "ws", m.Username)
}

// finish ends the run of a job token (its token is refused from now on) and emits policy's
// run event, as FinishRun does.
func (p *fakePolicy) finish(tok string) { p.refuse(tok, "run") }

// revoke revokes a job token on its own and emits policy's token event, as RevokeToken does.
func (p *fakePolicy) revoke(tok string) { p.refuse(tok, "token") }

func (p *fakePolicy) refuse(tok, kind string) {
	p.mu.Lock()
	r := p.runs[tok]
	delete(p.runs, tok)
	p.mu.Unlock()
	p.emit(kind, r.GetWorkspace(), r.GetJobId())
}

// run records a run and returns its job token.
func (p *fakePolicy) run(owner string, origin policyv1.RunOrigin, viewer string) string {
	return p.runIn("ws", owner, origin, viewer)
}

// runIn records a run in workspace ws (members are the same in every workspace).
func (p *fakePolicy) runIn(ws, owner string, origin policyv1.RunOrigin, viewer string) string {
	tok := "mwj_" + randHex(16)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs[tok] = &policyv1.RunIdentity{Workspace: ws, JobId: randHex(8), PermissionedAs: owner, Origin: origin,
		HasViewer: viewer != "", ViewerEmail: viewer}
	return tok
}

func serveGRPC(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	addr, _ := serveGRPCAt(t, "127.0.0.1:0", register, opts...)
	return addr
}

// serveGRPCAt serves at addr (a test that restarts a server serves again where it was) and
// returns the address and the server, stopped at cleanup.
func serveGRPCAt(t testing.TB, addr string, register func(*grpc.Server), opts ...grpc.ServerOption) (string, *grpc.Server) {
	lis, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	s := grpc.NewServer(opts...)
	register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// ---- environment ----

type env struct {
	t          testing.TB
	svcDSN     string
	superDSN   string
	host       string
	port       int
	clusterID  string
	adminUser  string
	adminPass  string
	targetDB   string
	targetDSN  string // as admin
	policy     *fakePolicy
	policyAddr string
	policySrv  *grpc.Server
	keySpec    string
	instance   string
	replicas   []*replica
	// audit is the audit configuration of the replicas started from now on (the service's
	// defaults, with a key: secrets are recorded as keyed hashes).
	audit server.AuditConfig
}

type replica struct {
	eng    *engine.Engine
	stream *stream.Stream
	fol    *stream.LiveFollower
	cache  *engine.Cache
	cc     *grpc.ClientConn
	pool   *pgxpool.Pool
	// proxyPort is where its PostgreSQL proxy listens (startProxied); 0: none.
	proxyPort int
	proxy     *pgproxy.Server
	rejudged  app.RejudgeCounts
	// rec is its audit trail (env.audit), written through a pool of its own so that tests
	// counting the statements of pool see roleset's own only.
	rec *audit.Recorder
}

// migrator brings a database to roleset's schema.
var migrator = pgtest.Migrations(migrations.FS)

func superExec(t testing.TB, dsn string, sqls ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, s := range sqls {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
}

func withDB(dsn, db string) string {
	i := strings.LastIndex(dsn, "/")
	j := strings.Index(dsn[i:], "?")
	if j < 0 {
		return dsn[:i+1] + db
	}
	return dsn[:i+1] + db + dsn[i+j:]
}

func loginDSN(host string, port int, user, password, db string) string {
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", user, password, net.JoinHostPort(host, fmt.Sprint(port)), db)
}

// newEnv builds the service DB, the target cluster (database + non-superuser admin) and the
// policy stand-in. Replicas are started with env.start.
func newEnv(t testing.TB) *env {
	e := &env{t: t, instance: "inst-" + randHex(4), clusterID: "c" + randHex(4)}
	e.svcDSN = pgtest.NewDatabase(t, "roleset", migrator)
	e.superDSN = pgtest.Superuser(t)
	e.host, e.port = pgtest.Addr(t)
	targetDSN := pgtest.NewDatabase(t, "", nil)
	e.targetDB = targetDSN[strings.LastIndex(targetDSN, "/")+1:]
	if i := strings.Index(e.targetDB, "?"); i >= 0 {
		e.targetDB = e.targetDB[:i]
	}
	e.adminUser = "rsadm_" + randHex(4)
	e.adminPass = randHex(16)
	superExec(t, e.superDSN,
		fmt.Sprintf(`CREATE ROLE %s LOGIN CREATEROLE PASSWORD '%s'`, e.adminUser, e.adminPass),
		fmt.Sprintf(`GRANT pg_signal_backend TO %s`, e.adminUser))
	superExec(t, targetDSN, fmt.Sprintf(`ALTER SCHEMA public OWNER TO %s`, e.adminUser))
	e.targetDSN = loginDSN(e.host, e.port, e.adminUser, e.adminPass, e.targetDB)
	t.Cleanup(func() { e.dropClusterRoles() })
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	e.keySpec = "k1:" + base64.StdEncoding.EncodeToString(key)
	e.audit = server.DefaultAudit()
	e.audit.Key = server.Secret(randHex(32))
	e.policy = newFakePolicy()
	e.servePolicy("127.0.0.1:0")
	return e
}

// servePolicy serves the policy stand-in at addr and records where (policyAddr) and the
// server (policySrv: stopping it is policy going away; serving again at policyAddr, with the
// same stand-in, is policy restarted on its own database).
func (e *env) servePolicy(addr string) {
	e.policyAddr, e.policySrv = serveGRPCAt(e.t, addr, func(s *grpc.Server) {
		policyv1.RegisterRunServiceServer(s, e.policy)
		policyv1.RegisterWorkspaceServiceServer(s, e.policy)
		policyv1.RegisterEventServiceServer(s, e.policy)
	})
}

// dropClusterRoles removes the cluster-global roles this test made (role names are global).
func (e *env) dropClusterRoles() {
	for _, r := range e.replicas {
		r.eng.Close()
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.superDSN)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	pool, err := pgxpool.New(ctx, e.svcDSN)
	if err == nil {
		defer pool.Close()
		rows, _ := pool.Query(ctx, `SELECT login FROM datatable_role_set UNION SELECT login FROM datatable_role_set_retiring UNION SELECT name FROM datatable_role`)
		names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, n := range names {
			_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, n)
		}
	}
	for _, db := range []string{e.targetDB} {
		c2, err := pgx.Connect(ctx, withDB(e.superDSN, db))
		if err == nil {
			_, _ = c2.Exec(ctx, fmt.Sprintf(`REASSIGN OWNED BY %s TO postgres`, e.adminUser))
			c2.Close(ctx)
		}
	}
	rows, err := conn.Query(ctx, `SELECT rolname FROM pg_roles WHERE pg_has_role($1, oid, 'member') AND rolname <> $1 OR rolname LIKE 'wm_set_%' OR rolname = $1`, e.adminUser)
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, n := range names {
		if n == e.adminUser {
			continue
		}
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, n)
		if c2, err := pgx.Connect(ctx, withDB(e.superDSN, e.targetDB)); err == nil {
			_, _ = c2.Exec(ctx, fmt.Sprintf(`DROP OWNED BY "%s"`, n))
			c2.Close(ctx)
		}
		_, _ = conn.Exec(ctx, fmt.Sprintf(`DROP ROLE IF EXISTS "%s"`, n))
	}
}

// adminOnly authenticates the static admin token only: a replica's admin RPCs.
var adminOnly = auth.Static{AdminToken: adminToken}

// interceptorsWith is the server's auth, audit and validation steps for tests, in pkg/server's
// order: a on the admin RPCs, nothing on the public ones (their bearer is a job token the
// engine checks); rec, if not nil, records each call by roleset's audit rules.
func interceptorsWith(a auth.Authenticator, rec *audit.Recorder) grpc.ServerOption {
	v := api.Validators()
	rules := api.AuditRules()
	public := map[string]bool{}
	for _, m := range api.PublicMethods {
		public[m] = true
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !public[info.FullMethod] {
			tok, err := auth.BearerToken(ctx)
			if err != nil {
				return nil, err
			}
			id, err := a.Authenticate(ctx, tok)
			if err != nil {
				return nil, err
			}
			ctx = auth.WithIdentity(ctx, id)
		}
		validated := func(ctx context.Context, req any) (any, error) {
			if err := v.Validate(req); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}
		if rec == nil {
			return validated(ctx, req)
		}
		return (&audit.Interceptor{Recorder: rec, Rules: rules}).Unary(ctx, req, info, validated)
	}
	return grpc.ChainUnaryInterceptor(unary)
}

// startOther starts a replica of another instance on the same database and cluster, and
// returns it with that instance's id.
func (e *env) startOther() (*replica, string) {
	other := "other-" + randHex(4)
	return e.start(func(c *engine.Config) { c.InstanceID = other }), other
}

// keyring is the replicas' key ring, for tests that decrypt what roleset stored.
func (e *env) keyring(t testing.TB) *secret.Keyring {
	keys, err := secret.ParseKeyring(e.keySpec)
	require.NoError(t, err)
	return keys
}

// newPool opens a pool on roleset's database, closed at cleanup; tracer (if not nil) sees
// every statement it sends.
func (e *env) newPool(t testing.TB, tracer pgx.QueryTracer) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(e.svcDSN)
	require.NoError(t, err)
	cfg.MaxConns = 24
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// newEngine builds an engine of this instance (opts change its config) over pool, asking a
// new connection to policy, answering from cache.
func (e *env) newEngine(t testing.TB, pool *pgxpool.Pool, cache *engine.Cache, opts ...func(*engine.Config)) (*engine.Engine, *policyidentity.Client) {
	ccfg := engine.Config{InstanceID: e.instance, Keys: e.keyring(t)}
	for _, o := range opts {
		o(&ccfg)
	}
	pol := policyidentity.New(dial(t, e.policyAddr))
	return engine.New(ccfg, store.New(pool), pol, cache), pol
}

// serveAPI serves eng's API like a replica does (admin RPCs authenticated by authn, calls
// recorded in srv.Audit if set) and returns a connection to it.
func serveAPI(t testing.TB, srv *api.Server, authn auth.Authenticator) *grpc.ClientConn {
	return dial(t, serveGRPC(t, srv.Register, interceptorsWith(authn, srv.Audit)))
}

// start starts a replica: its own pools, stream listener, policy follower, caches and gRPC
// server, sharing the databases with the others.
func (e *env) start(opts ...func(*engine.Config)) *replica {
	t := e.t
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pool := e.newPool(t, nil)
	own := stream.New(pool, stream.Options{PollInterval: 200 * time.Millisecond, PruneInterval: -1})
	r := &replica{stream: own, pool: pool}
	rec, err := e.audit.NewRecorder("roleset", e.newPool(t, nil), nil)
	require.NoError(t, err)
	t.Cleanup(rec.Close) // before its pool closes (cleanups run last first)
	r.rec = rec
	r.cache = engine.NewCache(time.Minute, 100_000, func() bool { return own.Live() && r.fol.Live() })
	var pol *policyidentity.Client
	r.eng, pol = e.newEngine(t, pool, r.cache, opts...)
	r.fol = pol.Follower(r.eng, nil)
	own.Subscribe(func(stream.Event) { r.eng.DropConnections() })
	go func() { _ = own.Run(ctx) }()
	go func() { _ = r.fol.Run(ctx) }()
	r.cc = serveAPI(t, &api.Server{Engine: r.eng, Stream: own, Audit: rec}, adminOnly)
	select {
	case <-own.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("stream not ready")
	}
	require.Eventually(t, r.fol.Live, 10*time.Second, 10*time.Millisecond)
	e.replicas = append(e.replicas, r)
	return r
}

func adminCtx() context.Context { return bearerCtx(adminToken) }

// bearerCtx sends token as the bearer, as it is: an empty one too (servicetest.Bearer sends
// none), so a test can see what roleset does with "Bearer ".
func bearerCtx(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

func (r *replica) roles() rolesetv1.RoleServiceClient { return rolesetv1.NewRoleServiceClient(r.cc) }
func (r *replica) datatables() rolesetv1.DatatableServiceClient {
	return rolesetv1.NewDatatableServiceClient(r.cc)
}
func (r *replica) conns() rolesetv1.ConnectionServiceClient {
	return rolesetv1.NewConnectionServiceClient(r.cc)
}

// registerCluster registers the target cluster through the API.
func (e *env) registerCluster(r *replica) {
	_, err := rolesetv1.NewClusterServiceClient(r.cc).UpsertCluster(adminCtx(), &rolesetv1.UpsertClusterRequest{
		ClusterId: e.clusterID, Host: e.host, Port: int32(e.port), MaintenanceDatabase: e.targetDB,
		AdminUser: e.adminUser, AdminPassword: e.adminPass})
	require.NoError(e.t, err)
}

func (e *env) createRole(r *replica, name string) *rolesetv1.Role {
	resp, err := r.roles().CreateRole(adminCtx(), &rolesetv1.CreateRoleRequest{ClusterId: e.clusterID, Name: name})
	require.NoError(e.t, err)
	return resp.GetRole()
}

func reasonOf(err error) commonv1.ErrorReason {
	r, _ := errs.Reason(err)
	return r
}

// query logs in with a credential (real SCRAM) and returns the sorted ids of visible orders.
func query(ctx context.Context, c *rolesetv1.ResolveConnectionResponse) ([]int, error) {
	conn, err := pgx.Connect(ctx, loginDSN(c.GetHost(), int(c.GetPort()), c.GetUser(), c.GetPassword(), c.GetDatabase()))
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id FROM orders ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// canLogin reports whether user/password authenticates.
func (e *env) canLogin(user, password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, loginDSN(e.host, e.port, user, password, e.targetDB))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}
