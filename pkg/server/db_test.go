package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	"github.com/millwright/millwright/pkg/pgtest"
)

// TestHealthFollowsDatabase runs against a real Postgres: SERVING while the pool pings,
// NOT_SERVING while the database refuses connections, SERVING again once it accepts them.
func TestHealthFollowsDatabase(t *testing.T) {
	dsn := pgtest.NewDatabase(t, "", nil)
	admin, err := pgx.Connect(testCtx(t), pgtest.Superuser(t))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	dbname := cfg.ConnConfig.Database

	pool := pgtest.Pool(t, dsn)

	e := start(t, func(s setup) {
		s.opts.Pool = pool
		s.opts.SchemaVersion = func(context.Context) (int64, int64, error) { return 3, 3, nil }
	})
	ctx := testCtx(t)
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	require.Eventually(t, func() bool { return healthStatus(ctx, e.conn, "") == serving }, 10*time.Second, 20*time.Millisecond)

	// The database goes away.
	_, err = admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS false`, pgx.Identifier{dbname}.Sanitize()))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbname)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return healthStatus(ctx, e.conn, "") == notServing }, 10*time.Second, 20*time.Millisecond)

	// And comes back.
	_, err = admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS true`, pgx.Identifier{dbname}.Sanitize()))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return healthStatus(ctx, e.conn, "") == serving }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, e.stop(t))
}

// TestRewriteRealPostgresErrors checks RewriteError on errors produced by a real server.
func TestRewriteRealPostgresErrors(t *testing.T) {
	dsn := pgtest.NewDatabase(t, "", nil)
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `CREATE TABLE members (email text PRIMARY KEY); INSERT INTO members VALUES ('alice@example.com')`)
	require.NoError(t, err)

	cases := []struct {
		name string
		sql  string
		code codes.Code
	}{
		{"unique violation", `INSERT INTO members VALUES ('alice@example.com')`, codes.AlreadyExists},
		{"statement timeout", `SET statement_timeout = 10; SELECT pg_sleep(1)`, codes.Canceled},
		{"bug", `SELECT email FROM no_such_table`, codes.Internal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := conn.Exec(ctx, tc.sql)
			require.Error(t, err)
			got := errs.RewriteError(ctx, fmt.Errorf("store: %w", err))
			assert.Equal(t, tc.code, status.Code(got), "%v", err)
			for _, leak := range []string{"alice@example.com", "SELECT", "INSERT", "no_such_table", "members"} {
				assert.NotContains(t, status.Convert(got).Message(), leak)
			}
			_, _ = conn.Exec(ctx, `RESET statement_timeout`)
		})
	}
}
