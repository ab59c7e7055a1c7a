package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/policy/migrations"
)

// TestBuilderDefinitionUpgrade: migration 00006 on a database at version 5 whose settings hold
// keys written before the one definition of "builder on". The refused keys and a non-boolean
// "builder" are dropped, the rest is kept, and each changed row emits a settings event carrying
// the flag, so billing's projection (which counted those keys) is corrected.
func TestBuilderDefinitionUpgrade(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t, "policy-v5", func(ctx context.Context, dsn string) error {
		return migrate.UpTo(ctx, dsn, migrations.FS, 5)
	})
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows := map[string]string{
		"apps":    `{"builder_apps": true, "runs": true}`,
		"legacy":  `{"operator_builder_enabled": true, "Builder": true, "builder_flows": true}`,
		"notbool": `{"builder": "yes", "strip_builder_sdk_read_scopes": true}`,
		"on":      `{"builder": true}`,
		"clean":   `{"runs": false}`,
	}
	for ws, settings := range rows {
		_, err := conn.Exec(ctx, `INSERT INTO workspace (id, name) VALUES ($1, $1)`, ws)
		require.NoError(t, err)
		// Version 5's guard watched "builder" only; the seat check is claimed as done for "on".
		_, err = conn.Exec(ctx, `SELECT set_config('millwright.builder_enable_checked', $1, false)`, ws)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO workspace_settings (workspace_id, operator_settings) VALUES ($1, $2)`, ws, settings)
		require.NoError(t, err)
	}
	var before int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM stream_outbox`).Scan(&before))

	_, err = migrate.Up(ctx, dsn, migrations.FS)
	require.NoError(t, err)

	want := map[string]string{
		"apps":    `{"runs": true}`,
		"legacy":  `{}`,
		"notbool": `{"strip_builder_sdk_read_scopes": true}`,
		"on":      `{"builder": true}`,
		"clean":   `{"runs": false}`,
	}
	for ws, w := range want {
		var same bool
		var on bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT operator_settings = $2::jsonb, builder FROM workspace_settings WHERE workspace_id = $1`, ws, w).Scan(&same, &on))
		require.True(t, same, "%s: settings after the upgrade", ws)
		require.Equal(t, ws == "on", on, "%s: builder flag", ws)
	}
	evRows, err := conn.Query(ctx, `SELECT key, payload->>'builder' FROM stream_outbox WHERE id > $1 AND kind = 'settings' ORDER BY key`, before)
	require.NoError(t, err)
	events := map[string]string{}
	for evRows.Next() {
		var k, b string
		require.NoError(t, evRows.Scan(&k, &b))
		events[k] = b
	}
	require.NoError(t, evRows.Err())
	require.Equal(t, map[string]string{"apps": "false", "legacy": "false", "notbool": "false"}, events,
		"one settings event per changed row, carrying the flag")
}
