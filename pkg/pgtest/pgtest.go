package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/pkg/migrate"
)

// Migrator prepares a template database (given its DSN).
type Migrator func(ctx context.Context, dsn string) error

// Migrations is the Migrator that applies the migrations in fsys with pkg/migrate, as the
// services do at startup.
func Migrations(fsys fs.FS) Migrator {
	return func(ctx context.Context, dsn string) error {
		_, err := migrate.Up(ctx, dsn, fsys)
		return err
	}
}

// server is the PostgreSQL this test binary uses: its own cluster, or TEST_DATABASE_URL's.
type server struct {
	base    *url.URL // superuser URL; only the database name is changed per DSN
	cluster *cluster // nil when TEST_DATABASE_URL is used
	// prefix names every database this binary creates; the random part keeps test binaries
	// that share a TEST_DATABASE_URL server (go test ./... runs them in parallel) apart.
	prefix string
	seq    atomic.Int64

	mu        sync.Mutex
	templates map[string]*template
	created   map[string]bool // databases not dropped yet
}

type template struct {
	once   sync.Once
	dbname string
	err    error
}

var (
	startOnce sync.Once
	srv       *server
	srvErr    error
)

// Main is called from a test binary's TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
// It runs the tests and then stops and removes the cluster it started (if any), and exits with
// m.Run's code.
func Main(m *testing.M) {
	code := m.Run()
	shutdown()
	os.Exit(code)
}

// NewDatabase returns the DSN (URL form) of a brand-new database for this test, created with
// CREATE DATABASE ... TEMPLATE <template>. The template named `template` is created and migrated
// with `migrate` once per test binary (the first migrator given for a name wins). template ""
// (and nil migrate) gives an empty database. The database is dropped in t.Cleanup (WITH
// (FORCE)). Calls t.Fatal on failure.
func NewDatabase(t testing.TB, template string, migrate Migrator) string {
	t.Helper()
	s := get(t)
	src := "template0" // template1 may be connected to or modified by someone; template0 never is
	if template != "" {
		name, err := s.template(template, migrate)
		if err != nil {
			t.Fatal(err)
		}
		src = name
	} else if migrate != nil {
		t.Fatal("pgtest: NewDatabase: a migrator needs a template name")
	}
	name := s.prefix + "db" + strconv.FormatInt(s.seq.Add(1), 10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.create(ctx, name, src); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.drop(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return s.dsn(name)
}

// Superuser returns a DSN for the cluster's superuser on the "postgres" database (for tests that
// create roles, read pg_stat_activity, pg_terminate_backend, etc.).
func Superuser(t testing.TB) string {
	t.Helper()
	return get(t).dsn("postgres")
}

// Addr returns host and port of the server (tests that build their own DSNs for logins they
// created).
func Addr(t testing.TB) (host string, port int) {
	t.Helper()
	s := get(t)
	port = 5432
	if p := s.base.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	return s.base.Hostname(), port
}

// get starts the server on first use, so that test binaries which never need one start nothing.
func get(t testing.TB) *server {
	t.Helper()
	startOnce.Do(func() { srv, srvErr = start() })
	if srvErr != nil {
		t.Fatal(srvErr)
	}
	return srv
}

func start() (*server, error) {
	s := &server{
		prefix:    "pgtest_" + randomHex(4) + "_",
		templates: map[string]*template{},
		created:   map[string]bool{},
	}
	if raw := os.Getenv("TEST_DATABASE_URL"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			// Not quoting the value: it holds a password.
			return nil, errors.New("pgtest: TEST_DATABASE_URL must be a postgres:// URL of a superuser")
		}
		s.base = u
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return s, s.withConn(ctx, func(*pgx.Conn) error { return nil })
	}
	c, err := startCluster(ClusterOptions{})
	if err != nil {
		return nil, err
	}
	s.cluster = c
	s.base, err = url.Parse(c.url("postgres"))
	return s, err
}

// shutdown stops our cluster, or drops what this binary left on TEST_DATABASE_URL's server.
func shutdown() {
	// Also makes any later use fail cleanly instead of starting a cluster nobody stops.
	startOnce.Do(func() { srvErr = errors.New("pgtest: used after Main finished") })
	if srv == nil {
		return
	}
	if srv.cluster != nil {
		srv.cluster.stop()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv.mu.Lock()
	names := make([]string, 0, len(srv.created))
	for name := range srv.created {
		names = append(names, name)
	}
	srv.mu.Unlock()
	for _, name := range names {
		if err := srv.drop(ctx, name); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}

// template returns the name of the migrated template database, building it on first use.
func (s *server) template(name string, migrate Migrator) (string, error) {
	s.mu.Lock()
	tp, ok := s.templates[name]
	if !ok {
		tp = &template{dbname: s.prefix + "tpl_" + identPart(name)}
		s.templates[name] = tp
	}
	s.mu.Unlock()
	tp.once.Do(func() { tp.err = s.buildTemplate(name, tp.dbname, migrate) })
	return tp.dbname, tp.err
}

func (s *server) buildTemplate(name, db string, migrate Migrator) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := s.create(ctx, db, "template0"); err != nil {
		return err
	}
	if migrate != nil {
		if err := migrate(ctx, s.dsn(db)); err != nil {
			return fmt.Errorf("pgtest: migrate template %q: %w%s", name, err, s.logTail())
		}
	}
	// CREATE DATABASE ... TEMPLATE fails while anyone is connected to the template: forbid new
	// connections and end those a migrator may have left open (Postgres waits for them to go).
	return s.withConn(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "ALTER DATABASE "+quote(db)+" ALLOW_CONNECTIONS false"); err != nil {
			return fmt.Errorf("pgtest: seal template %q: %w", name, err)
		}
		_, err := c.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db)
		return err
	})
}

func (s *server) create(ctx context.Context, name, template string) error {
	s.mu.Lock()
	s.created[name] = true
	s.mu.Unlock()
	return s.withConn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "CREATE DATABASE "+quote(name)+" TEMPLATE "+quote(template))
		if err != nil {
			return fmt.Errorf("pgtest: create database %s from %s: %w%s", name, template, err, s.logTail())
		}
		return nil
	})
}

func (s *server) drop(ctx context.Context, name string) error {
	return s.withConn(ctx, func(c *pgx.Conn) error {
		// FORCE: a test that forgot to close its pool must not make cleanup fail.
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+quote(name)+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("pgtest: drop database %s: %w%s", name, err, s.logTail())
		}
		s.mu.Lock()
		delete(s.created, name)
		s.mu.Unlock()
		return nil
	})
}

// withConn runs f on a fresh superuser connection. A connection per call rather than a pool:
// a pool's background goroutines would show up in the goleak checks of the tests using us.
func (s *server) withConn(ctx context.Context, f func(*pgx.Conn) error) error {
	c, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: connect as superuser: %w%s", err, s.logTail())
	}
	defer c.Close(context.Background())
	return f(c)
}

func (s *server) dsn(db string) string {
	u := *s.base
	u.Path, u.RawPath = "/"+db, ""
	return u.String()
}

func (s *server) logTail() string {
	if s.cluster == nil {
		return ""
	}
	return s.cluster.logTail()
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// identPart turns a template name into a short, readable piece of a database name (Postgres
// truncates names at 63 bytes); the hash keeps names that sanitize alike apart.
func identPart(name string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '_'
	}, name)
	if len(clean) > 30 {
		clean = clean[:30]
	}
	sum := sha256.Sum256([]byte(name))
	return clean + "_" + hex.EncodeToString(sum[:4])
}
