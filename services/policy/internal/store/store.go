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
	"github.com/millwright/millwright/services/policy/internal/policy"
)

// Store is the policy database.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

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
	var err error
	for attempt := range maxAttempts {
		err = pgx.BeginTxFunc(ctx, s.pool, opts, fn)
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

// retry runs fn (one statement in its own implicit transaction) with inTx's retry rule.
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
		return policy.NotFound("workspace", ws)
	}
	return err
}

func workspaceExists(ctx context.Context, q pgx.Tx, ws string) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM workspace WHERE id = $1`, ws).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return policy.NotFound("workspace", ws)
	}
	return err
}

// Head returns the stream head.
func (s *Store) Head(ctx context.Context) (int64, error) { return stream.Head(ctx, s.pool) }
