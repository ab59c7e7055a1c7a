package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/pkg/failpoint"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// OperatorSettings returns a workspace's resolved operator settings.
func (s *Store) OperatorSettings(ctx context.Context, ws string) (rulebook.OperatorSettings, error) {
	var raw []byte
	err := s.pool.QueryRow(ctx, `SELECT operator_settings FROM workspace_settings WHERE workspace_id = $1`, ws).Scan(&raw)
	if errNoRows(err) {
		return rulebook.OperatorSettings{}, rulebook.NotFound("workspace", ws)
	}
	if err != nil {
		return rulebook.OperatorSettings{}, err
	}
	return rulebook.ResolveOperatorSettings(raw)
}

// OperatorSettingsChange is what UpdateOperatorSettings did.
type OperatorSettingsChange struct {
	Before, After rulebook.OperatorSettings
	// Position is the stream id of the "settings" event, 0 when nothing changed.
	Position int64
}

// UpdateOperatorSettings merges patch into the stored settings under a row lock. The UPDATE
// fires the operator_settings_change trigger when the JSON changed, which appends the
// "settings" event in this same transaction.
//
// Callers outside this package must go through settings.Service.Update, which runs the seat
// check first: this is the only statement that writes operator_settings.
//
// enable, when not nil, is called inside the transaction when the change turns builder on, with
// the stream head: an error from it aborts the change. It runs through checkSeats, the priced
// path every seat-adding change shares (member writes too): one advisory lock taken before the
// head is read, so two changes made at the same moment are priced one after the other, the
// second seeing the first (a check-then-commit race would let both pass the seat cap together).
func (s *Store) UpdateOperatorSettings(ctx context.Context, ws string, patch rulebook.SettingsPatch,
	enable func(ctx context.Context, head int64) error) (OperatorSettingsChange, error) {
	var ch OperatorSettingsChange
	err := s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		ch = OperatorSettingsChange{}
		var raw []byte
		err := tx.QueryRow(ctx, `SELECT operator_settings FROM workspace_settings WHERE workspace_id = $1 FOR UPDATE`, ws).Scan(&raw)
		if errNoRows(err) {
			return rulebook.NotFound("workspace", ws)
		}
		if err != nil {
			return err
		}
		if ch.Before, err = rulebook.ResolveOperatorSettings(raw); err != nil {
			return err
		}
		merged, err := rulebook.Merge(raw, patch)
		if err != nil {
			return err
		}
		if ch.After, err = rulebook.ResolveOperatorSettings(merged); err != nil {
			return err
		}
		var changed bool
		if err := tx.QueryRow(ctx, `SELECT operator_settings IS DISTINCT FROM $2::jsonb FROM workspace_settings WHERE workspace_id = $1`,
			ws, merged).Scan(&changed); err != nil {
			return err
		}
		if !changed {
			return nil
		}
		if !ch.Before.Builder && ch.After.Builder {
			// The builder guard trigger (migration 00003) refuses builder-on writes that did
			// not come through here.
			failpoint.Hit("policy/settings/before-seat-check")
			if err := checkSeats(ctx, tx, enable, builderGuard, ws); err != nil {
				return err
			}
			failpoint.Hit("policy/settings/seat-checked") // billing said yes, nothing committed
		}
		_, err = tx.Exec(ctx, `UPDATE workspace_settings SET operator_settings = $2::jsonb WHERE workspace_id = $1`, ws, merged)
		return err
	})
	if err != nil || ch.Before == ch.After {
		return ch, err
	}
	failpoint.Hit("policy/settings/committed") // committed, the caller never told
	// The event gets its id at commit, so it is read afterwards: the newest settings event of
	// this workspace, ours or a later one, either way at least as fresh as this change.
	err = s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM stream_outbox WHERE kind = 'settings' AND workspace = $1`, ws).Scan(&ch.Position)
	return ch, err
}
