package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/services/billing/internal/seats"
)

// Apply writes one stream event's change and advances the position to its id, in one
// transaction. The position row is locked first, so concurrent consumers (one per replica)
// serialize, and an event at or below the stored position is skipped: applied reports false,
// and nothing is written. A resumed stream that re-sends an event therefore never applies it
// twice, and a crash between the change and the position cannot happen.
func (s *Store) Apply(ctx context.Context, eventID int64, change seats.Change) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE projection_state
			SET position = $1, applied_events = applied_events + 1, updated_at = now()
			WHERE position < $1`, eventID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		applied = true
		return applyChange(ctx, tx, change, eventID)
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

// Resync replaces the whole projection with a snapshot of policy's state and sets the
// position to the snapshot's, in one transaction: readers see the old projection or the new
// one, never a mix. DELETE rather than TRUNCATE so readers are not blocked meanwhile.
func (s *Store) Resync(ctx context.Context, snap seats.Snapshot) error {
	if snap.Position < 0 {
		return errors.New("store: snapshot with a negative position")
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM projection_state FOR UPDATE`); err != nil {
			return err
		}
		// Row-by-row counter maintenance would cost a trigger call per membership twice
		// (delete, load); switch it off for this transaction and rebuild once at the end.
		if _, err := tx.Exec(ctx, `SELECT set_config('billing.bulk_load', 'on', true)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM member`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM workspace_builder`); err != nil {
			return err
		}
		// The snapshot is keyed like the tables; a duplicate key would make COPY fail, so the
		// last occurrence wins, as it would have in the stream.
		members := map[[2]string]seats.MemberChange{}
		var order [][2]string
		for _, m := range snap.Members {
			k := [2]string{m.Workspace, m.Username}
			if _, ok := members[k]; !ok {
				order = append(order, k)
			}
			members[k] = m
		}
		rows := make([][]any, 0, len(order))
		for _, k := range order {
			m := members[k]
			if m.Removed {
				continue
			}
			rows = append(rows, []any{m.Workspace, m.Username, m.Email, string(m.Role), m.Disabled})
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"member"},
			[]string{"workspace", "username", "email", "role", "disabled"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("store: load members: %w", err)
		}
		builders := map[string]bool{}
		for _, b := range snap.Builders {
			builders[b.Workspace] = b.Builder
		}
		brows := make([][]any, 0, len(builders))
		for ws, on := range builders {
			brows = append(brows, []any{ws, on})
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"workspace_builder"},
			[]string{"workspace", "builder"}, pgx.CopyFromRows(brows)); err != nil {
			return fmt.Errorf("store: load builder flags: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT seat_person_rebuild(), set_config('billing.bulk_load', 'off', true)`); err != nil {
			return fmt.Errorf("store: rebuild seat counters: %w", err)
		}
		_, err := tx.Exec(ctx, `
			UPDATE projection_state
			SET position = $1, applied_events = 0, resyncs = resyncs + 1, updated_at = now()`,
			snap.Position)
		return err
	})
}

// State is the projection's bookkeeping.
type State struct {
	Position      int64
	AppliedEvents int64 // events applied since the last resync
	Resyncs       int64
}

// ProjectionState reads the bookkeeping row.
func (s *Store) ProjectionState(ctx context.Context) (State, error) {
	var st State
	err := s.pool.QueryRow(ctx, `SELECT position, applied_events, resyncs FROM projection_state`).
		Scan(&st.Position, &st.AppliedEvents, &st.Resyncs)
	return st, err
}
