package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaSQL is the trail's schema, the same in every service's database. It is idempotent:
// pkg/migrate runs it after every service's migrations.
//
// audit_event holds the chain: body is the event's canonical JSON (Event.Body), the columns
// beside it are copies for the filters of List, checked against the body by Verify.
// audit_head is the end of the chain (the last seq and hash, so that a deleted last event is
// found too) and the anchor retention leaves (the seq and hash of the last pruned event).
const SchemaSQL = `
CREATE TABLE IF NOT EXISTS audit_event (
    seq        bigint      PRIMARY KEY,
    at         timestamptz NOT NULL,
    rpc        text        NOT NULL,
    class      text        NOT NULL,
    outcome    text        NOT NULL,
    rule       text        NOT NULL,
    actor      text        NOT NULL,
    workspace  text        NOT NULL,
    object     text        NOT NULL,
    body       text        NOT NULL,
    prev_hash  bytea       NOT NULL,
    hash       bytea       NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_event_at_idx ON audit_event (at);
CREATE INDEX IF NOT EXISTS audit_event_workspace_idx ON audit_event (workspace, seq);
CREATE INDEX IF NOT EXISTS audit_event_actor_idx ON audit_event (actor, seq);
CREATE TABLE IF NOT EXISTS audit_head (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    seq         bigint  NOT NULL DEFAULT 0,
    hash        bytea   NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000',
    pruned_seq  bigint  NOT NULL DEFAULT 0,
    pruned_hash bytea   NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'
);
INSERT INTO audit_head DEFAULT VALUES ON CONFLICT DO NOTHING;
`

// Store is the trail in one service's database.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns the trail in pool's database (migrated: SchemaSQL).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Append writes events at the end of the chain, in order, in one transaction, and sets their
// Seq. Replicas append to one chain: the head row's lock orders them.
func (s *Store) Append(ctx context.Context, events []Event) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var seq int64
		var prev []byte
		if err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_head FOR UPDATE`).Scan(&seq, &prev); err != nil {
			return fmt.Errorf("audit: read chain head: %w", err)
		}
		b := &pgx.Batch{}
		for i := range events {
			seq++
			// The column keeps microseconds: the body must say the same time.
			events[i].Seq = seq
			events[i].Time = events[i].Time.UTC().Truncate(time.Microsecond)
			events[i].LastTime = events[i].LastTime.UTC().Truncate(time.Microsecond)
			body := events[i].Body()
			hash := ChainHash(prev, body)
			e := events[i]
			b.Queue(`INSERT INTO audit_event (seq, at, rpc, class, outcome, rule, actor, workspace, object, body, prev_hash, hash)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
				seq, e.Time, e.RPC, string(e.Class), e.Outcome, e.Rule, e.Actor, e.Workspace, e.Object, string(body), prev, hash)
			prev = hash
		}
		b.Queue(`UPDATE audit_head SET seq = $1, hash = $2`, seq, prev)
		return tx.SendBatch(ctx, b).Close()
	})
}

// Head is the seq of the last event written.
func (s *Store) Head(ctx context.Context) (int64, error) {
	var seq int64
	err := s.pool.QueryRow(ctx, `SELECT seq FROM audit_head`).Scan(&seq)
	return seq, err
}

// Filter selects events for List; zero fields select everything.
type Filter struct {
	Workspace, Actor, Outcome, Rule, Object, Class, RPC string
	Start, End                                          time.Time
	AfterSeq                                            int64 // only seq > AfterSeq (paging, Watch)
	Limit                                               int
}

// List returns the events f selects, oldest first, with their chain hashes.
func (s *Store) List(ctx context.Context, f Filter) ([]Stored, error) {
	var where []string
	args := []any{f.AfterSeq}
	where = append(where, "seq > $1")
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	for col, v := range map[string]string{"workspace": f.Workspace, "actor": f.Actor, "outcome": f.Outcome,
		"rule": f.Rule, "class": f.Class, "rpc": f.RPC} {
		if v != "" {
			add(col+" = $%d", v)
		}
	}
	if f.Object != "" {
		add("strpos(object, $%d) > 0", f.Object)
	}
	if !f.Start.IsZero() {
		add("at >= $%d", f.Start)
	}
	if !f.End.IsZero() {
		add("at < $%d", f.End)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	q := `SELECT seq, body, prev_hash, hash FROM audit_event WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(` ORDER BY seq LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stored, error) {
		var st Stored
		var seq int64
		var body string
		if err := r.Scan(&seq, &body, &st.PrevHash, &st.Hash); err != nil {
			return st, err
		}
		if err := json.Unmarshal([]byte(body), &st.Event); err != nil {
			return st, fmt.Errorf("audit: event %d: body is not an event: %w", seq, err)
		}
		st.Seq = seq // the row's, which Verify checks against the body's
		return st, nil
	})
}

// Stored is an event as the trail holds it.
type Stored struct {
	Event
	PrevHash, Hash []byte
}

// Verdict is what Verify found.
type Verdict struct {
	OK          bool
	Checked     int64
	FirstBadSeq int64
	Problem     string
}

// verifyPage is how many events Verify reads at a time.
const verifyPage = 1000

// Verify walks the retained chain from the retention anchor to the head and reports the first
// event that is not what was written: a body or column edited, an event deleted (a gap in seq,
// or the head pointing past the last event), or events reordered (a prev_hash that is not the
// hash before it).
func (s *Store) Verify(ctx context.Context) (Verdict, error) {
	var headSeq, seq int64
	var headHash, prev []byte
	if err := s.pool.QueryRow(ctx, `SELECT seq, hash, pruned_seq, pruned_hash FROM audit_head`).Scan(&headSeq, &headHash, &seq, &prev); err != nil {
		return Verdict{}, fmt.Errorf("audit: read chain head: %w", err)
	}
	v := Verdict{OK: true}
	bad := func(at int64, problem string) (Verdict, error) {
		return Verdict{Checked: v.Checked, FirstBadSeq: at, Problem: problem}, nil
	}
	for {
		rows, err := s.pool.Query(ctx, `SELECT seq, at, rpc, class, outcome, rule, actor, workspace, object, body, prev_hash, hash
                                         FROM audit_event WHERE seq > $1 ORDER BY seq LIMIT $2`, seq, verifyPage)
		if err != nil {
			return Verdict{}, err
		}
		n := 0
		for rows.Next() {
			n++
			var r struct {
				seq                                                 int64
				at                                                  time.Time
				rpc, class, outcome, rule, actor, workspace, object string
				body                                                string
				prevHash, hash                                      []byte
			}
			if err := rows.Scan(&r.seq, &r.at, &r.rpc, &r.class, &r.outcome, &r.rule, &r.actor, &r.workspace, &r.object, &r.body, &r.prevHash, &r.hash); err != nil {
				rows.Close()
				return Verdict{}, err
			}
			switch {
			case r.seq != seq+1:
				rows.Close()
				return bad(seq+1, fmt.Sprintf("event %d is missing (the next is %d)", seq+1, r.seq))
			case !bytes.Equal(r.prevHash, prev):
				rows.Close()
				return bad(r.seq, "its prev_hash is not the hash of the event before it (reordered or an earlier event replaced)")
			case !bytes.Equal(r.hash, ChainHash(prev, []byte(r.body))):
				rows.Close()
				return bad(r.seq, "its body does not match its hash (edited)")
			}
			var e Event
			if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Seq != r.seq {
				rows.Close()
				return bad(r.seq, "its body is not the event of this seq")
			}
			if !e.Time.Equal(r.at) || e.RPC != r.rpc || string(e.Class) != r.class || e.Outcome != r.outcome || e.Rule != r.rule ||
				e.Actor != r.actor || e.Workspace != r.workspace || e.Object != r.object {
				rows.Close()
				return bad(r.seq, "its columns do not match its body (edited)")
			}
			seq, prev = r.seq, r.hash
			v.Checked++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return Verdict{}, err
		}
		if n < verifyPage {
			break
		}
	}
	switch {
	case seq < headSeq:
		return bad(seq+1, fmt.Sprintf("events %d..%d are missing (the head is at %d)", seq+1, headSeq, headSeq))
	case seq > headSeq || !bytes.Equal(prev, headHash):
		return bad(seq, "the chain head does not match the last event")
	}
	return v, nil
}

// Prune removes the events recorded before cutoff, oldest first, and moves the retention
// anchor to the last one removed, so Verify starts from it. Only a prefix of the chain goes:
// an event older than cutoff after a younger one (two replicas' clocks) waits for the ones
// before it. It removes at most limit events per call (the monitor loop calls it again) and
// answers how many.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var upTo, pruned int64
		err := tx.QueryRow(ctx, `
            SELECT coalesce((SELECT min(seq) - 1 FROM audit_event WHERE at >= $1), h.seq), h.pruned_seq
            FROM audit_head h FOR UPDATE OF h`, cutoff).Scan(&upTo, &pruned)
		if err != nil {
			return err
		}
		upTo = min(upTo, pruned+int64(limit))
		if upTo <= pruned {
			return nil
		}
		var hash []byte
		if err := tx.QueryRow(ctx, `SELECT hash FROM audit_event WHERE seq = $1`, upTo).Scan(&hash); err != nil {
			return fmt.Errorf("audit: prune through %d: %w", upTo, err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM audit_event WHERE seq <= $1`, upTo)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `UPDATE audit_head SET pruned_seq = $1, pruned_hash = $2`, upTo, hash)
		return err
	})
	return n, err
}
