package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// Event is one entry of the stream.
type Event struct {
	// ID is the position in the stream: strictly increasing, never reused (gaps are normal:
	// rolled-back transactions draw ids too).
	ID        int64
	Kind      string
	Workspace string
	Key       string
	// Op is "insert", "update" or "delete"; for in-process subscribers also OpResync.
	Op string
	// Payload is a JSON object of the columns the trigger lists (the old row's for a delete).
	Payload   json.RawMessage
	CreatedAt time.Time
}

// OpResync is the Op of a synthetic event delivered to in-process subscribers when the
// listener fell behind the retention window (rows it had not read were pruned): drop every
// cached entry. Its ID is the head the listener resumes from. It never appears in the outbox
// or on Watch (remote consumers get a ResyncError instead).
const OpResync = "resync"

// Querier is the part of a pool, connection or transaction Head and Append need.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queryer also reads many rows: pools, connections and transactions all satisfy it.
type queryer interface {
	Querier
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Head returns the stream's safe head: every event up to it is committed or will never
// exist (see UpgradeSQL), so a reader that reflects any snapshot taken after Head returned and
// then applies the events after Head misses nothing. Call it on a pool or in READ COMMITTED,
// as a statement of its own, never inside a REPEATABLE READ snapshot (its answer would be
// the snapshot's, not a fresh one): read Head first, then open the snapshot. That snapshot may
// already reflect events after Head; they are delivered again, so applying them must be
// idempotent, as every consumer of state-carrying events is. Head waits for commits in flight
// (not for open transactions).
func Head(ctx context.Context, q Querier) (int64, error) {
	var h int64
	if err := q.QueryRow(ctx, `SELECT stream_safe_head()`).Scan(&h); err != nil {
		return 0, fmt.Errorf("stream: read head: %w", err)
	}
	return h, nil
}

// Latest returns the highest id visible in q's snapshot (at least Head): once a reader has
// delivered it, it has delivered every event committed before q's snapshot. It is what a
// writer waits for to read its own and its predecessors' writes through a cache.
func Latest(ctx context.Context, q Querier) (int64, error) {
	var h int64
	err := q.QueryRow(ctx, `SELECT greatest((SELECT coalesce(max(id), 0) FROM stream_outbox),
	                                        (SELECT pruned_through FROM stream_state))`).Scan(&h)
	if err != nil {
		return 0, fmt.Errorf("stream: read latest: %w", err)
	}
	return h, nil
}

// prunedThrough returns stream_state.pruned_through.
func prunedThrough(ctx context.Context, q Querier) (int64, error) {
	var p int64
	if err := q.QueryRow(ctx, `SELECT pruned_through FROM stream_state`).Scan(&p); err != nil {
		return 0, fmt.Errorf("stream: read pruned_through: %w", err)
	}
	return p, nil
}

// Append appends an event that no trigger produces (e.g. "run ended") in the caller's
// transaction and returns its id. Readers deliver nothing
// drawn after it until tx ends, so call it as late as possible before COMMIT. e.ID and e.CreatedAt are ignored; a nil Payload is
// an empty object.
func Append(ctx context.Context, tx Querier, e Event) (int64, error) {
	if e.Kind == "" || e.Op == "" {
		return 0, errors.New("stream: append: kind and op are required")
	}
	if e.Op == OpResync {
		return 0, errors.New("stream: append: op resync is reserved")
	}
	var payload *string
	if len(e.Payload) > 0 {
		if !json.Valid(e.Payload) {
			return 0, errors.New("stream: append: payload is not valid JSON")
		}
		p := string(e.Payload)
		payload = &p
	}
	var id int64
	err := tx.QueryRow(ctx, `SELECT stream_append($1, $2, $3, $4, $5::text::jsonb)`,
		e.Kind, e.Workspace, e.Key, e.Op, payload).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("stream: append: %w", err)
	}
	return id, nil
}

// readSQL reads committed events after a position, up to a safe head read before it (by a
// separate statement, so this one's snapshot is taken after every id up to the head
// committed): a reader moving its position to the last row it read never skips an id that
// commits later.
const readSQL = `SELECT id, kind, workspace, key, op, payload, created_at
                   FROM stream_outbox WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`

// batchSize bounds one catch-up read; callers loop until a short batch.
const batchSize = 1000

// tryHead is Head without the wait: ok is false, and nothing waited, when a commit holding the
// stream's lock is in flight.
func tryHead(ctx context.Context, q Querier) (head int64, ok bool, err error) {
	var h *int64
	if err := q.QueryRow(ctx, `SELECT stream_try_safe_head()`).Scan(&h); err != nil {
		return 0, false, fmt.Errorf("stream: read head: %w", err)
	}
	if h == nil {
		return 0, false, nil
	}
	return *h, true, nil
}

// readAfter reads up to limit events after `after`, up to head, a safe head read before it by
// a statement of its own (Head, tryHead).
func readAfter(ctx context.Context, q queryer, after, head int64, limit int) ([]Event, error) {
	if head <= after {
		return nil, nil
	}
	rows, err := q.Query(ctx, readSQL, after, head, limit)
	if err != nil {
		return nil, fmt.Errorf("stream: read after %d: %w", after, err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var payload []byte
		err := r.Scan(&e.ID, &e.Kind, &e.Workspace, &e.Key, &e.Op, &payload, &e.CreatedAt)
		e.Payload = payload
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("stream: read after %d: %w", after, err)
	}
	return evs, nil
}

// ToProto converts an event to the wire envelope.
func ToProto(e *Event) *commonv1.Event {
	if e == nil {
		return nil
	}
	pe := &commonv1.Event{
		Id:          e.ID,
		Kind:        e.Kind,
		Workspace:   e.Workspace,
		Key:         e.Key,
		Op:          e.Op,
		PayloadJson: string(e.Payload),
	}
	if !e.CreatedAt.IsZero() {
		pe.CreatedAt = timestamppb.New(e.CreatedAt)
	}
	return pe
}

// FromProto converts a wire envelope back (a nil event gives the zero Event).
func FromProto(pe *commonv1.Event) Event {
	if pe == nil {
		return Event{}
	}
	e := Event{
		ID:        pe.GetId(),
		Kind:      pe.GetKind(),
		Workspace: pe.GetWorkspace(),
		Key:       pe.GetKey(),
		Op:        pe.GetOp(),
	}
	if pe.GetPayloadJson() != "" {
		e.Payload = json.RawMessage(pe.GetPayloadJson())
	}
	if pe.GetCreatedAt() != nil {
		e.CreatedAt = pe.GetCreatedAt().AsTime()
	}
	return e
}
