package store

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// The job path's generic plans, made on empty tables (a new database; each new weekly
// partition), probe by index: no sequential scan and no hash join, whose cost would grow with
// every run recorded for the life of the session. Fails with the pool's defaults: there the
// planner, seeing empty tables, scans run and token whole.
func TestJobPlansProbeByIndexOnEmptyTables(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	maps.Copy(cfg.RuntimeParams, JobSessionParams())
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()

	// explain prepares sql and shows the plan EXECUTE would run with literal arguments (a
	// utility statement takes no parameters).
	explain := func(sql string, args ...string) string {
		t.Helper()
		_, err := conn.Prepare(ctx, "job", sql)
		require.NoError(t, err)
		defer func() { _ = conn.Deallocate(ctx, "job") }()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, "EXPLAIN EXECUTE job('"+strings.Join(args, "', '")+"')")
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	job, digest := "{00000000-0000-4000-8000-000000000001}", `{"\\x`+strings.Repeat("00", 32)+`"}`
	plans := map[string]string{
		"record": explain(recordRunsSQL, "{0}", "{w}", job, "{u/a}", "{direct}", digest, "{user}", "{t}", digest,
			"{"+time.Now().Format(time.RFC3339)+"}"),
		"finish": explain(finishRunsSQL, "{0}", job, "{w}"),
	}
	for name, plan := range plans {
		require.NotContains(t, plan, "Seq Scan", "%s:\n%s", name, plan)
		require.NotContains(t, plan, "Hash Join", "%s:\n%s", name, plan)
		require.NotContains(t, plan, "Hash Left Join", "%s:\n%s", name, plan)
		require.Contains(t, plan, "Index", "%s:\n%s", name, plan)
	}
}
