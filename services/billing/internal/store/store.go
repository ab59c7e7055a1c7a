package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millwright/millwright/services/billing/internal/seats"
)

// Store is billing's database: the projection, the cap, the reports and the seat count.
type Store struct {
	pool    *pgxpool.Pool
	weights seats.Weights
}

// New returns a Store counting seats with the given weights.
func New(pool *pgxpool.Pool, w seats.Weights) *Store { return &Store{pool: pool, weights: w} }

// Weights returns the weights this store counts with.
func (s *Store) Weights() seats.Weights { return s.weights }

// usageSQL is the only way this package counts seats: the seat_usage function over
// seat_classes, the one definition in the migrations.
const usageSQL = `SELECT authors, operators, milliseats FROM seat_usage($1, $2)`

func (s *Store) count(ctx context.Context, q pgx.Tx) (seats.Usage, error) {
	var u seats.Usage
	err := q.QueryRow(ctx, usageSQL, s.weights.AuthorMilli, s.weights.OperatorMilli).
		Scan(&u.Authors, &u.Operators, &u.MilliSeats)
	return u, err
}

// Current is the usage as shown (GetSeatUsage), with the cap and the position it is
// consistent with, all read in one statement's snapshot.
type Current struct {
	Usage    seats.Usage
	CapSeats int64
	Position int64
}

// Usage counts seats now.
func (s *Store) Usage(ctx context.Context) (Current, error) {
	var c Current
	err := s.pool.QueryRow(ctx, `
		SELECT u.authors, u.operators, u.milliseats,
		       (SELECT cap_seats FROM seat_cap), (SELECT position FROM projection_state)
		FROM seat_usage($1, $2) u`, s.weights.AuthorMilli, s.weights.OperatorMilli).
		Scan(&c.Usage.Authors, &c.Usage.Operators, &c.Usage.MilliSeats, &c.CapSeats, &c.Position)
	return c, err
}

// Position is how far the projection has applied policy's stream.
func (s *Store) Position(ctx context.Context) (int64, error) {
	var p int64
	err := s.pool.QueryRow(ctx, `SELECT position FROM projection_state`).Scan(&p)
	return p, err
}

// ErrBehind is returned by Price when the snapshot it counted in has not applied the
// position the caller asked for (the caller waits before calling, so this is a race with a
// resync that moved the position back).
var ErrBehind = errors.New("projection behind the requested position")

// Price counts seats twice in one REPEATABLE READ snapshot: as they are, and as if change
// were applied. The change is applied to the projection tables inside the transaction and
// rolled back, so the hypothetical count runs the very same seat definition as every other
// number. change is a seats.MemberChange or seats.BuilderChange.
func (s *Store) Price(ctx context.Context, change seats.Change, minPosition int64) (seats.Price, error) {
	var p seats.Price
	err := s.retry(ctx, func() error {
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			return err
		}
		// Never committed: the hypothetical change must not survive.
		defer tx.Rollback(context.WithoutCancel(ctx))
		if err := tx.QueryRow(ctx,
			`SELECT (SELECT position FROM projection_state), (SELECT cap_seats FROM seat_cap)`).
			Scan(&p.Position, &p.CapSeats); err != nil {
			return err
		}
		if p.Position < minPosition {
			return ErrBehind
		}
		if p.Before, err = s.count(ctx, tx); err != nil {
			return err
		}
		if err := applyChange(ctx, tx, change, 0); err != nil {
			return err
		}
		p.After, err = s.count(ctx, tx)
		return err
	})
	return p, err
}

// SetCap sets the licensed cap (0: none) and returns it.
func (s *Store) SetCap(ctx context.Context, capSeats int64) (int64, error) {
	var c int64
	err := s.pool.QueryRow(ctx,
		`UPDATE seat_cap SET cap_seats = $1, updated_at = now() RETURNING cap_seats`, capSeats).Scan(&c)
	return c, err
}

// Report is one recorded usage report.
type Report struct {
	ID         int64
	ReportDate time.Time
	TakenAt    time.Time
	Usage      seats.Usage
	Weights    seats.Weights
	CapSeats   int64
	Position   int64
}

const reportCols = `id, report_date, taken_at, authors, operators, milliseats,
	author_milliseats, operator_milliseats, cap_seats, position`

func scanReport(row pgx.Row) (Report, error) {
	var r Report
	err := row.Scan(&r.ID, &r.ReportDate, &r.TakenAt, &r.Usage.Authors, &r.Usage.Operators,
		&r.Usage.MilliSeats, &r.Weights.AuthorMilli, &r.Weights.OperatorMilli, &r.CapSeats, &r.Position)
	return r, err
}

// WriteReport records the current usage as a dated report, counted by seat_usage in the
// INSERT's own snapshot, and returns it.
func (s *Store) WriteReport(ctx context.Context) (Report, error) {
	return scanReport(s.pool.QueryRow(ctx, `
		INSERT INTO usage_report (report_date, authors, operators, milliseats,
		                          author_milliseats, operator_milliseats, cap_seats, position)
		SELECT (now() AT TIME ZONE 'UTC')::date, u.authors, u.operators, u.milliseats, $1, $2,
		       (SELECT cap_seats FROM seat_cap), (SELECT position FROM projection_state)
		FROM seat_usage($1, $2) u
		RETURNING `+reportCols, s.weights.AuthorMilli, s.weights.OperatorMilli))
}

// ErrNotFound is a read of a row that does not exist.
var ErrNotFound = errors.New("store: not found")

// Report reads one report (ErrNotFound when there is none).
func (s *Store) Report(ctx context.Context, id int64) (Report, error) {
	r, err := scanReport(s.pool.QueryRow(ctx, `SELECT `+reportCols+` FROM usage_report WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	return r, err
}

// ListReports returns up to limit reports with an id below beforeID (0: from the newest),
// newest first.
func (s *Store) ListReports(ctx context.Context, beforeID int64, limit int) ([]Report, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+reportCols+` FROM usage_report
		WHERE $1 = 0 OR id < $1 ORDER BY id DESC LIMIT $2`, beforeID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.AppendRows([]Report(nil), rows, func(row pgx.CollectableRow) (Report, error) { return scanReport(row) })
}

// retry runs f again on a serialization failure or deadlock, a bounded number of times with
// jitter, and never once the context is done.
func (s *Store) retry(ctx context.Context, f func() error) error {
	const attempts = 5
	for i := 1; ; i++ {
		err := f()
		var pg *pgconn.PgError
		if err == nil || i == attempts || ctx.Err() != nil ||
			!errors.As(err, &pg) || (pg.Code != "40001" && pg.Code != "40P01") {
			return err
		}
		d := time.Duration(i) * 5 * time.Millisecond
		d += time.Duration(rand.Int64N(int64(d)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

// applyChange writes one change to the projection tables; eventID is recorded on the rows
// it writes (0 for a hypothetical change or a snapshot load).
func applyChange(ctx context.Context, tx pgx.Tx, change seats.Change, eventID int64) error {
	switch c := change.(type) {
	case nil:
		return nil
	case seats.MemberChange:
		if c.Removed {
			_, err := tx.Exec(ctx, `DELETE FROM member WHERE workspace = $1 AND username = $2`,
				c.Workspace, c.Username)
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO member (workspace, username, email, role, disabled, last_event_id)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (workspace, username) DO UPDATE
			SET email = excluded.email, role = excluded.role, disabled = excluded.disabled,
			    last_event_id = excluded.last_event_id`,
			c.Workspace, c.Username, c.Email, string(c.Role), c.Disabled, eventID)
		return err
	case seats.BuilderChange:
		_, err := tx.Exec(ctx, `
			INSERT INTO workspace_builder (workspace, builder, last_event_id) VALUES ($1, $2, $3)
			ON CONFLICT (workspace) DO UPDATE
			SET builder = excluded.builder, last_event_id = excluded.last_event_id`,
			c.Workspace, c.Builder, eventID)
		return err
	case seats.WorkspaceRemoved:
		if _, err := tx.Exec(ctx, `DELETE FROM member WHERE workspace = $1`, c.Workspace); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM workspace_builder WHERE workspace = $1`, c.Workspace)
		return err
	}
	return fmt.Errorf("store: unknown change %T", change)
}
