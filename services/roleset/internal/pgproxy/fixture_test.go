package pgproxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/roleset/internal/secret"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The proxy user every fixture knows, and its password (a ticket, later).
const (
	testUser     = "t_alice"
	testPassword = "alice-ticket-secret"
)

// fixture is a proxy in front of the test cluster, with one upstream login of its own and
// one proxy user (testUser) bound to it.
type fixture struct {
	srv      *Server
	addr     *net.TCPAddr
	login    string // the upstream login testUser's sessions run as
	upstream string // its DSN, for direct connections (the baseline of benchmarks)
	super    *pgxpool.Pool
	auth     *testAuth
}

// testAuth is an Authorizer over a map, changeable while the proxy runs.
type testAuth struct {
	mu    sync.Mutex
	users map[string]authEntry
}

type authEntry struct {
	verifier string
	target   Target
}

func (a *testAuth) Verifier(_ context.Context, user, _ string) (string, Target, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.users[user]
	return e.verifier, e.target, ok, nil
}

func (a *testAuth) set(user string, e authEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users[user] = e
}

// newFixture starts a proxy with cfg (its Authorizer is the fixture's) in front of the shared
// test cluster and closes it at the end of the test. A test may change cfg's other fields.
func newFixture(t testing.TB, cfg Config) *fixture {
	t.Helper()
	return newFixtureOn(t, pgtest.Superuser(t), "disable", cfg)
}

// newFixtureOn is newFixture in front of the server superDSN names (a cluster of the test's
// own); the upstream login connects with sslmode, directly and through the proxy alike.
func newFixtureOn(t testing.TB, superDSN, sslmode string, cfg Config) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{super: pgtest.Pool(t, superDSN), auth: &testAuth{users: map[string]authEntry{}}}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	f.login = "px_" + hex.EncodeToString(b)
	password := secret.NewPassword()
	_, err := f.super.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`,
		f.login, secret.ScramVerifier(password, secret.DefaultIterations)))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = f.super.Exec(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = $1`, f.login)
		_, err := f.super.Exec(ctx, `DROP ROLE `+f.login)
		require.NoError(t, err)
	})
	super := f.super.Config().ConnConfig
	f.upstream = fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres sslmode=%s",
		super.Host, super.Port, f.login, password, sslmode)
	upstream, err := pgconn.ParseConfig(f.upstream)
	require.NoError(t, err)
	f.auth.set(testUser, authEntry{
		verifier: secret.ScramVerifier(testPassword, secret.DefaultIterations),
		target: Target{
			Dial:      DialConfig(upstream),
			Terminate: f.terminate,
			Bind:      Binding{TicketID: testUser, JobID: "job-1", DataTable: "sales", Login: f.login},
		},
	})
	cfg.Authorizer = f.auth
	f.srv = New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = ln.Addr().(*net.TCPAddr)
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, f.srv.Close())
		require.ErrorIs(t, <-served, ErrServerClosed)
	})
	return f
}

// terminate is the Target.Terminate of the fixture's sessions: it waits until the backend is
// gone.
func (f *fixture) terminate(ctx context.Context, pid uint32) error {
	_, err := f.super.Exec(ctx, `SELECT pg_terminate_backend($1, 5000)`, int64(pid))
	return err
}

// dsn is a connection string to the proxy; password "" leaves it out (psql takes PGPASSWORD).
func (f *fixture) dsn(user, password, sslmode string) string {
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=postgres sslmode=%s connect_timeout=10",
		f.addr.Port, user, sslmode)
	if password != "" {
		dsn += " password=" + password
	}
	return dsn
}

// connect opens a pgx connection to the proxy as testUser, closed at the end of the test.
func (f *fixture) connect(t testing.TB, sslmode string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), f.dsn(testUser, testPassword, sslmode))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// backendGone reports whether the upstream backend pid has left pg_stat_activity.
func (f *fixture) backendGone(t testing.TB, pid uint32) bool {
	t.Helper()
	var n int
	require.NoError(t, f.super.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&n))
	return n == 0
}

// pgCode is the SQLSTATE of err, "" if it is not a server error.
func pgCode(err error) string {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code
	}
	return ""
}

// selfSignedTLS is a server TLS config with a fresh self-signed certificate for 127.0.0.1.
func selfSignedTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.X509KeyPair(pgtest.SelfSignedCert(t))
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}
