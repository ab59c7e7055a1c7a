package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention says how long runs and tokens are kept once they can no longer authenticate
// (docs/policy.md, "Retention"; migration 00007 partitions the tables).
type Retention struct {
	// Runs: a run and its job token are removed with their partition once its range ended
	// more than Runs ago (so Runs to Runs + PartitionDays after the run started). It must
	// exceed the job token lifetime, so that every run removed has ended (finished, or its
	// token expired): internal/retention checks that.
	Runs time.Duration
	// Tokens: a user token is removed once it has been revoked or expired for more than Tokens.
	Tokens time.Duration
	// PartitionDays is the width of a new partition, aligned on Mondays 00:00 UTC for 7 and
	// on whole UTC days in general. Every retained partition costs the token and run lookups
	// an index probe and the planner a relation (docs/policy.md, "Retention"): weeks keep
	// their number at about Runs/7 + 2.
	PartitionDays int
	// Ahead is how far past now partitions must exist (a run is recorded into the partition of
	// its start; none there fails the insert).
	Ahead time.Duration
}

// MaintainResult says what one maintenance pass did.
type MaintainResult struct {
	// Skipped: another replica was maintaining; this pass did nothing.
	Skipped bool
	// Created and Dropped name the partitions created and dropped.
	Created, Dropped []string
	// UserTokens is how many dead user tokens were deleted.
	UserTokens int64
}

// maintenanceLock is the session advisory lock one maintenance pass holds (one key, its own
// number; the stream's is a different one).
const maintenanceLock int64 = 7501166_0000_0001

// lockTimeout bounds every wait for a table lock in a pass: attaching and detaching take
// locks on run and token_job, and queuing behind a long transaction would queue RecordRun
// behind us. A pass that times out is retried at the next tick.
const lockTimeout = "5s"

// partitioned are the day-partitioned tables, in drop order (a job token goes before its run;
// either missing refuses the token, see authenticate).
var partitioned = []struct{ parent, prefix string }{
	{"token_job", "token_job_p"},
	{"run", "run_p"},
}

// userTokenBatch bounds one DELETE of dead user tokens (each row emits a stream event).
const userTokenBatch = 1000

// Maintain runs one maintenance pass as of now: it creates the partitions of run and
// token_job that cover now's UTC day to r.Ahead after now, detaches and drops the partitions
// whose range ended more than r.Runs before now, and deletes the user tokens dead for more
// than r.Tokens. Every replica may call it at any time: a pass takes a session advisory lock
// and skips (Skipped) when another holds it, and every step is idempotent, so a pass cut
// short is finished by the next one.
func (s *Store) Maintain(ctx context.Context, now time.Time, r Retention) (res MaintainResult, err error) {
	if r.Runs <= 0 || r.Tokens <= 0 || r.PartitionDays < 1 || r.Ahead <= 0 {
		return res, fmt.Errorf("store: maintain: retention %+v: every field must be positive", r)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, maintenanceLock).Scan(&got); err != nil {
		// The lock may have been taken with the answer lost: the connection goes, not back.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
		return res, err
	}
	if !got {
		conn.Release()
		return MaintainResult{Skipped: true}, nil
	}
	defer release(conn)
	if _, err := conn.Exec(ctx, `SET lock_timeout = '`+lockTimeout+`'`); err != nil {
		return res, err
	}
	for _, p := range partitioned {
		created, dropped, err := maintainPartitions(ctx, conn.Conn(), p.parent, p.prefix, now, r)
		res.Created = append(res.Created, created...)
		res.Dropped = append(res.Dropped, dropped...)
		if err != nil {
			return res, fmt.Errorf("store: maintain %s: %w", p.parent, err)
		}
	}
	cutoff := now.Add(-r.Tokens)
	for {
		// least() ignores a NULL revoked_at: the moment the token stopped authenticating.
		tag, err := conn.Exec(ctx, `
			DELETE FROM token_user WHERE id IN (
				SELECT id FROM token_user WHERE least(revoked_at, expires_at) < $1 LIMIT $2)`,
			cutoff, userTokenBatch)
		if err != nil {
			return res, fmt.Errorf("store: maintain user tokens: %w", err)
		}
		res.UserTokens += tag.RowsAffected()
		if tag.RowsAffected() < userTokenBatch {
			return res, nil
		}
	}
}

// release unlocks and resets the maintenance connection before it goes back to the pool; a
// connection that cannot be cleaned is closed instead, so a session lock never outlives its
// pass on an idle pooled connection.
func release(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, `RESET lock_timeout; SELECT pg_advisory_unlock(`+fmt.Sprint(maintenanceLock)+`)`); err != nil {
		_ = conn.Conn().Close(ctx)
	}
	conn.Release()
}

type partition struct {
	name    string
	pending bool       // DETACH ... CONCURRENTLY was interrupted: FINALIZE it
	lo, hi  *time.Time // nil: MINVALUE / MAXVALUE
}

// partitionsOf lists parent's partitions with their bounds, read back from the catalog (the
// bound expression prints timestamps in the session's zone, with the offset, so the cast back
// is exact).
func partitionsOf(ctx context.Context, conn *pgx.Conn, parent string) ([]partition, error) {
	rows, err := conn.Query(ctx, `
		SELECT c.relname, i.inhdetachpending,
		       (regexp_match(b, 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
		       (regexp_match(b, 'TO \(''([^'']*)''\)'))[1]::timestamptz
		FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) AS b
		WHERE i.inhparent = $1::regclass
		ORDER BY 4`, parent)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (partition, error) {
		var p partition
		err := row.Scan(&p.name, &p.pending, &p.lo, &p.hi)
		return p, err
	})
}

func maintainPartitions(ctx context.Context, conn *pgx.Conn, parent, prefix string, now time.Time, r Retention) (created, dropped []string, err error) {
	parts, err := partitionsOf(ctx, conn, parent)
	if err != nil {
		return nil, nil, err
	}
	cutoff := now.Add(-r.Runs)
	for _, p := range parts {
		// A pending detach was decided by an earlier pass: finish it whatever the cutoff.
		if !p.pending && (p.hi == nil || p.hi.After(cutoff)) {
			continue
		}
		// CONCURRENTLY: RecordRun and the token lookups keep running while the partition
		// leaves (a plain DETACH or DROP would take an ACCESS EXCLUSIVE lock on the parent).
		// It cannot run in a transaction; if it is cut short, the partition stays "detach
		// pending" and the next pass finalizes it.
		mode := "CONCURRENTLY"
		if p.pending {
			mode = "FINALIZE"
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s %s`,
			ident(parent), ident(p.name), mode)); err != nil {
			return created, dropped, err
		}
		if _, err := conn.Exec(ctx, `DROP TABLE `+ident(p.name)); err != nil {
			return created, dropped, err
		}
		dropped = append(dropped, p.name)
	}
	// A pass cut short between a detach and its drop leaves a detached table: drop it. Only
	// this code names tables with these prefixes (and the migration's *_legacy).
	var leftovers []string
	rows, err := conn.Query(ctx, `
		SELECT relname FROM pg_class
		WHERE relkind = 'r' AND NOT relispartition AND relnamespace = current_schema()::regnamespace
		  AND (starts_with(relname, $1) OR relname = $2 || '_legacy')`, prefix, parent)
	if err == nil {
		leftovers, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return created, dropped, err
	}
	for _, name := range leftovers {
		if _, err := conn.Exec(ctx, `DROP TABLE `+ident(name)); err != nil {
			return created, dropped, err
		}
		dropped = append(dropped, name)
	}

	u := now.UTC()
	cursor := time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	end := now.Add(r.Ahead)
	for cursor.Before(end) {
		if p, ok := containing(parts, cursor); ok {
			if p.hi == nil {
				break
			}
			cursor = *p.hi
			continue
		}
		// Up to the next aligned boundary, or to the next existing partition (the ones the
		// migration made, or made with another width, are kept and the gaps filled).
		lo, hi := cursor, alignUp(cursor, r.PartitionDays)
		for _, p := range parts {
			if p.lo != nil && p.lo.After(lo) && p.lo.Before(hi) {
				hi = *p.lo
			}
		}
		name := prefix + lo.Format("20060102")
		// Created apart and then attached: ATTACH takes SHARE UPDATE EXCLUSIVE on the parent,
		// where CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE. The attach clones
		// the parent's indexes, foreign keys and triggers onto the new table.
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
				ident(name), ident(parent))); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
				ident(parent), ident(name), lo.Format(time.RFC3339), hi.Format(time.RFC3339)))
			return err
		})
		if err != nil {
			return created, dropped, fmt.Errorf("create %s: %w", name, err)
		}
		created = append(created, name)
		parts = append(parts, partition{name: name, lo: &lo, hi: &hi})
		cursor = hi
	}
	return created, dropped, nil
}

// containing returns the partition whose range holds t.
func containing(parts []partition, t time.Time) (partition, bool) {
	for _, p := range parts {
		if (p.lo == nil || !p.lo.After(t)) && (p.hi == nil || p.hi.After(t)) {
			return p, true
		}
	}
	return partition{}, false
}

// alignAnchor is a Monday: weeks start on Mondays 00:00 UTC, as date_trunc('week') does in the
// migration.
var alignAnchor = time.Date(1970, 1, 5, 0, 0, 0, 0, time.UTC)

// alignUp returns the first boundary after t of the partitions of width days.
func alignUp(t time.Time, days int) time.Time {
	width := time.Duration(days) * 24 * time.Hour
	n := t.Sub(alignAnchor) / width
	if t.Before(alignAnchor) {
		n-- // Duration division truncates toward zero
	}
	return alignAnchor.Add((n + 1) * width)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
