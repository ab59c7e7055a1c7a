package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// Store is the policy database.
type Store struct {
	pool *pgxpool.Pool
	// jobs runs the job path's statements (RecordRun, FinishRun): pool unless SetJobPool
	// gave one with generic plans.
	jobs     *pgxpool.Pool
	records  *batcher[NewRun, Run]
	finishes *batcher[finish, bool]
}

// Group commit bounds (batch.go): runs per statement, and statements of one kind in flight
// at once (each holds a connection through its COMMIT).
const (
	maxBatch = 128
	maxFlush = 2
)

// New returns a Store over pool.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool, jobs: pool}
	s.records = newBatcher(maxBatch, maxFlush, s.recordRuns)
	s.finishes = newBatcher(maxBatch, maxFlush, s.finishRuns)
	return s
}

// SetJobPool makes the job path's statements run on p, a pool whose sessions have
// JobSessionParams. Call it before the Store is used.
func (s *Store) SetJobPool(p *pgxpool.Pool) { s.jobs = p }

// JobSessionParams are the session settings of the job path's pool (SetJobPool).
//
// Generic plans (plan_cache_mode): the job path's statements probe every retained partition of
// run and token, and planning them per call (the main pool's force_custom_plan, which the
// catalog queries need) cost several times their execution.
//
// Index probes only (enable_seqscan, enable_hashjoin, enable_mergejoin off): a generic plan is
// made once per session, from the statistics of that moment, and kept. Made on a new
// partition (every week) or a new database, with tables still empty, it scanned run and token
// whole and hash-joined them against the batch: each statement then cost time in proportion to
// every run recorded since, for the life of the connection (measured: the job path's own
// throughput fell while it ran). Every statement here looks up at most a batch of keys
// (maxBatch) by index, so nested loops over index probes are right at any table size.
func JobSessionParams() map[string]string {
	return map[string]string{
		"plan_cache_mode":  "force_generic_plan",
		"enable_seqscan":   "off",
		"enable_hashjoin":  "off",
		"enable_mergejoin": "off",
	}
}

// Pool returns the underlying pool (for the stream and health checks).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

var (
	readWrite = pgx.TxOptions{}
	// snapshot reads see one consistent state across statements (tenancy, then catalog).
	snapshot = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
)

const maxAttempts = 5

// inTx runs fn in a transaction, retrying serialization failures and deadlocks with a bounded,
// jittered backoff. A cancelled context is never retried.
func (s *Store) inTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	return s.retry(ctx, func() error { return pgx.BeginTxFunc(ctx, s.pool, opts, fn) })
}

// retry runs fn (one statement in its own implicit transaction, or inTx's whole transaction),
// retrying the same failures with the same backoff.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range maxAttempts {
		err = fn()
		if !retryable(err) || ctx.Err() != nil || attempt == maxAttempts-1 {
			return err
		}
		d := time.Duration(1<<attempt)*5*time.Millisecond + rand.N(5*time.Millisecond)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
	return err
}

func retryable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01")
}

func isUnique(err error, constraint string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505" && (constraint == "" || pg.ConstraintName == constraint)
}

// lockWorkspace serializes writers of one workspace's membership (the last-admin invariant)
// without blocking foreign-key checks (NO KEY UPDATE does not conflict with KEY SHARE).
func lockWorkspace(ctx context.Context, tx pgx.Tx, ws string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM workspace WHERE id = $1 FOR NO KEY UPDATE`, ws).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return rulebook.NotFound("workspace", ws)
	}
	return err
}

func workspaceExists(ctx context.Context, q pgx.Tx, ws string) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM workspace WHERE id = $1`, ws).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return rulebook.NotFound("workspace", ws)
	}
	return err
}

// Head returns the stream head.
func (s *Store) Head(ctx context.Context) (int64, error) { return stream.Head(ctx, s.pool) }
