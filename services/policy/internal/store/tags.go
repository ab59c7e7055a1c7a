package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// SetWorkerTags replaces a workspace's tag rules.
func (s *Store) SetWorkerTags(ctx context.Context, ws string, rules []rulebook.TagRule) error {
	names, priv := unzip(rules, func(r rulebook.TagRule) (string, bool) { return r.Name, r.Privileged })
	return s.inWorkspace(ctx, ws, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM worker_tag WHERE workspace_id = $1 AND NOT (tag = ANY ($2))`, ws, names); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO worker_tag (workspace_id, tag, privileged)
			SELECT $1, t, p FROM unnest($2::text[], $3::bool[]) AS r(t, p)
			ON CONFLICT (workspace_id, tag) DO UPDATE SET privileged = EXCLUDED.privileged`, ws, names, priv)
		return err
	})
}

// WorkerTags lists a workspace's tag rules sorted by name.
func (s *Store) WorkerTags(ctx context.Context, ws string) ([]rulebook.TagRule, error) {
	var out []rulebook.TagRule
	err := s.inTx(ctx, snapshot, func(tx pgx.Tx) error {
		if err := workspaceExists(ctx, tx, ws); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT tag, privileged FROM worker_tag WHERE workspace_id = $1 ORDER BY tag`, ws)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (rulebook.TagRule, error) {
			var t rulebook.TagRule
			err := r.Scan(&t.Name, &t.Privileged)
			return t, err
		})
		return err
	})
	return out, err
}
