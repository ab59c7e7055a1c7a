package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { Main(m) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestNewDatabaseIsolated(t *testing.T) {
	a, b := NewDatabase(t, "", nil), NewDatabase(t, "", nil)
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "postgres://"), "DSN is a URL")

	ca, cb := connect(t, a), connect(t, b)
	_, err := ca.Exec(t.Context(), "CREATE TABLE only_in_a (id int); INSERT INTO only_in_a VALUES (1)")
	require.NoError(t, err)

	var n int
	require.NoError(t, cb.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n))
	require.Zero(t, n, "a table made in one database is visible in another")
}

func TestDatabaseDroppedAtCleanup(t *testing.T) {
	var name string
	t.Run("uses a database", func(t *testing.T) {
		u, err := url.Parse(NewDatabase(t, "", nil))
		require.NoError(t, err)
		name = strings.TrimPrefix(u.Path, "/")
	})
	var n int
	require.NoError(t, connect(t, Superuser(t)).QueryRow(t.Context(),
		"SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	require.Zero(t, n, "database %s still exists after its test", name)
}

func TestTemplateMigratedOnce(t *testing.T) {
	var calls atomic.Int32
	tmpl := "widgets-" + randomHex(4) // templates live per binary; -count=N must build anew
	migrate := func(ctx context.Context, dsn string) error {
		calls.Add(1)
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "CREATE TABLE widgets (id int PRIMARY KEY); INSERT INTO widgets VALUES (42)")
		return err
	}
	t.Run("parallel users", func(t *testing.T) {
		for i := range 6 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				c := connect(t, NewDatabase(t, tmpl, migrate))
				var id int
				require.NoError(t, c.QueryRow(t.Context(), "SELECT id FROM widgets").Scan(&id))
				require.Equal(t, 42, id)
				// Writes stay in this copy; the other copies must still see exactly one row.
				_, err := c.Exec(t.Context(), "INSERT INTO widgets VALUES ($1)", 100+i)
				require.NoError(t, err)
				var n int
				require.NoError(t, c.QueryRow(t.Context(), "SELECT count(*) FROM widgets").Scan(&n))
				require.Equal(t, 2, n)
			})
		}
	})
	require.EqualValues(t, 1, calls.Load(), "migrations ran more than once for one template")
}

func TestTemplateMigratorLeavesConnectionOpen(t *testing.T) {
	var leaked *pgx.Conn
	t.Cleanup(func() {
		if leaked != nil {
			leaked.Close(context.Background())
		}
	})
	migrate := func(ctx context.Context, dsn string) (err error) {
		if leaked, err = pgx.Connect(ctx, dsn); err != nil {
			return err
		}
		_, err = leaked.Exec(ctx, "CREATE TABLE t (x int)")
		return err // connection deliberately left open
	}
	tmpl := "leaky-" + randomHex(4)
	for range 2 {
		c := connect(t, NewDatabase(t, tmpl, migrate))
		_, err := c.Exec(t.Context(), "SELECT x FROM t")
		require.NoError(t, err)
	}
}

func TestMigrationErrorIsReported(t *testing.T) {
	s := get(t)
	_, err := s.template("broken", func(context.Context, string) error { return errors.New("boom") })
	require.ErrorContains(t, err, "boom")
}

func TestPasswordAuth(t *testing.T) {
	su := connect(t, Superuser(t))
	role := "pgtest_login_" + randomHex(4)
	_, err := su.Exec(t.Context(), fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'right-pw'", role))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = su.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	host, port := Addr(t)

	tests := []struct {
		name     string
		password string
		wantErr  bool
	}{
		{name: "right password", password: "right-pw"},
		{name: "wrong password", password: "wrong-pw", wantErr: true},
		{name: "no password", password: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := url.URL{
				Scheme:   "postgres",
				User:     url.UserPassword(role, tt.password),
				Host:     net.JoinHostPort(host, strconv.Itoa(port)),
				Path:     "/postgres",
				RawQuery: "sslmode=disable",
			}
			c, err := pgx.Connect(t.Context(), u.String())
			if !tt.wantErr {
				require.NoError(t, err)
				defer c.Close(context.Background())
				var who string
				require.NoError(t, c.QueryRow(t.Context(), "SELECT current_user").Scan(&who))
				require.Equal(t, role, who)
				return
			}
			require.Error(t, err, "login accepted without the right password")
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				require.Equal(t, "28P01", pgErr.Code) // invalid_password
			}
		})
	}
}

func TestHBADemandsSCRAM(t *testing.T) {
	if get(t).cluster == nil {
		t.Skip("TEST_DATABASE_URL: pg_hba.conf is not ours")
	}
	rows, err := connect(t, Superuser(t)).Query(t.Context(),
		"SELECT type, coalesce(address, ''), auth_method FROM pg_hba_file_rules")
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var typ, addr, method string
		require.NoError(t, rows.Scan(&typ, &addr, &method))
		got = append(got, typ+" "+addr+" "+method)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []string{
		"local  scram-sha-256",
		"host 127.0.0.1 scram-sha-256",
		"host ::1 scram-sha-256",
	}, got)
}

func TestVersionLess(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"9.6", "10", true},
		{"15", "16", true},
		{"16", "15", false},
		{"15", "15", false},
		{"9.5", "9.6", true},
	}
	for _, tt := range tests {
		t.Run(tt.a+"<"+tt.b, func(t *testing.T) {
			require.Equal(t, tt.want, versionLess(tt.a, tt.b))
		})
	}
}

// Tests using pgtest may check for leaked goroutines; pgtest itself must not leave any.
func TestNoGoroutinesLeft(t *testing.T) {
	t.Run("uses databases", func(t *testing.T) {
		connect(t, NewDatabase(t, "", nil))
		connect(t, NewDatabase(t, "widgets-for-goleak", nil))
		connect(t, Superuser(t))
	})
	goleak.VerifyNone(t)
}

// A cluster of the test's own with TLS serves TLS to sslmode=require, plain to disable, and has
// the max_connections asked for; the shared cluster keeps its own settings.
func TestNewClusterTLS(t *testing.T) {
	dsn := NewCluster(t, ClusterOptions{TLS: true, MaxConnections: 123})
	for _, tc := range []struct {
		sslmode string
		want    bool
	}{{"require", true}, {"disable", false}} {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		q := u.Query()
		q.Set("sslmode", tc.sslmode)
		u.RawQuery = q.Encode()
		var ssl bool
		var maxConns string
		require.NoError(t, connect(t, u.String()).QueryRow(t.Context(),
			`SELECT ssl, current_setting('max_connections') FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl, &maxConns))
		require.Equal(t, tc.want, ssl, tc.sslmode)
		require.Equal(t, "123", maxConns)
	}
	var shared string
	require.NoError(t, connect(t, Superuser(t)).QueryRow(t.Context(), `SHOW ssl`).Scan(&shared))
	require.Equal(t, "off", shared)
}
