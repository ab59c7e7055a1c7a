package pgtest

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Statements is a pgx tracer recording every statement a pool sends (reads, writes, and
// BEGIN/COMMIT alike: pgx sends them as statements of their own), for tests that bound how
// many round trips a path costs. Set it as the pool's ConnConfig.Tracer.
type Statements struct {
	// Only, when set, keeps only the statements whose context (the one pgx hands the tracer)
	// it accepts: those run on behalf of one gRPC method, say, and not a server's background
	// loops on the same pool. Nil keeps every statement.
	Only func(ctx context.Context) bool

	mu   sync.Mutex
	sqls []string
}

// TraceQueryStart records the statement.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if s.Only != nil && !s.Only(ctx) {
		return ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sqls = append(s.sqls, d.SQL)
	return ctx
}

// TraceQueryEnd does nothing: a statement counts when it is sent.
func (s *Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Take returns the statements recorded since the last Take and forgets them.
func (s *Statements) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sqls
	s.sqls = nil
	return out
}
