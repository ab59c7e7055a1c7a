package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/builderflag"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// One definition of "builder on": for every example, the Go rule (policy's resolve, billing's
// decoder), the SQL function (the guard), and the flag the stream payload carries agree.
func TestBuilderDefinitionAgrees(t *testing.T) {
	ctx := context.Background()
	_, pool := storeWithW(t)

	for _, ex := range builderflag.Examples {
		t.Run(ex.Settings, func(t *testing.T) {
			var sqlOn bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT operator_builder_on($1::jsonb)`, ex.Settings).Scan(&sqlOn))
			require.Equal(t, ex.On, sqlOn, "SQL operator_builder_on")
			require.Equal(t, ex.On, builderflag.On([]byte(ex.Settings)), "builderflag.On")
			resolved, err := rulebook.ResolveOperatorSettings([]byte(ex.Settings))
			require.NoError(t, err)
			require.Equal(t, ex.On, resolved.Builder, "policy's resolve")
		})
	}

	// What the stream carries: write the settings as the checked path would (the mark set),
	// read the event.
	for _, settings := range []string{`{"builder": true}`, `{"builder": false, "builder": true}`, `{"runs": false}`, `{"builder": false}`} {
		t.Run("payload "+settings, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, `SELECT set_config('millwright.builder_enable_checked', 'w', true)`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `UPDATE workspace_settings SET operator_settings = $1::jsonb WHERE workspace_id = 'w'`, settings)
			require.NoError(t, err)
			var payload []byte
			require.NoError(t, tx.QueryRow(ctx, `SELECT payload FROM stream_pending WHERE kind = 'settings' ORDER BY seq DESC LIMIT 1`).Scan(&payload))
			var p struct {
				Builder          *bool           `json:"builder"`
				OperatorSettings json.RawMessage `json:"operator_settings"`
			}
			require.NoError(t, json.Unmarshal(payload, &p))
			require.NotNil(t, p.Builder, "the payload carries the computed flag: %s", payload)
			require.Equal(t, builderflag.On([]byte(settings)), *p.Builder)
			require.Equal(t, builderflag.On(p.OperatorSettings), *p.Builder)
		})
	}
}

// The names builder rights had before, and any other spelling of "builder", are refused on
// write with a reason, whether or not the seat check ran: no reader counts them, so storing one
// could only mislead. {"builder_apps": true} used to pass the guard unpriced while billing
// charged it.
func TestBuilderLikeKeysRefusedOnWrite(t *testing.T) {
	ctx := context.Background()
	_, pool := storeWithW(t)

	cases := map[string]string{
		`{"builder_apps": true}`:             `key "builder_apps" is refused`,
		`{"builder_apps": false}`:            `key "builder_apps" is refused`,
		`{"builder_flows": true}`:            `key "builder_flows" is refused`,
		`{"operator_builder_enabled": true}`: `key "operator_builder_enabled" is refused`,
		`{"Builder": true}`:                  `key "Builder" is refused`,
		`{"my_BUILDER_flag": 1}`:             `key "my_BUILDER_flag" is refused`,
		`{"builder": "true"}`:                `"builder" must be a JSON boolean`,
		`{"builder": 1}`:                     `"builder" must be a JSON boolean`,
		`{"builder": null}`:                  `"builder" must be a JSON boolean`,
	}
	for settings, want := range cases {
		for _, checked := range []bool{false, true} {
			t.Run(settings, func(t *testing.T) {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx)
				if checked {
					_, err = tx.Exec(ctx, `SELECT set_config('millwright.builder_enable_checked', 'w', true)`)
					require.NoError(t, err)
				}
				_, err = tx.Exec(ctx, `UPDATE workspace_settings SET operator_settings = operator_settings || $1::jsonb WHERE workspace_id = 'w'`, settings)
				require.ErrorContains(t, err, want)
			})
		}
	}
	// The known keys and unknown keys that do not name builder rights still pass (the platform
	// git-syncs the object verbatim).
	_, err := pool.Exec(ctx, `UPDATE workspace_settings SET operator_settings = '{"strip_builder_sdk_read_scopes": false, "builder": false, "custom": 1}' WHERE workspace_id = 'w'`)
	require.NoError(t, err)
}
