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
	mu   sync.Mutex
	sqls []string
}

// TraceQueryStart records the statement.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
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
