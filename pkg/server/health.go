package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// readyPoll is how often readiness is retried while not ready: short, so a pod turns
// SERVING soon after migrate finishes.
const readyPoll = 500 * time.Millisecond

// readiness drives grpc.health.v1 (overall "" and every registered service) and /healthz
// from one question: can this replica answer? That needs the database reachable and the
// schema at exactly the version this binary was built for; serving on an older schema would
// run queries against tables that do not have the expected shape.
type readiness struct {
	hs       *health.Server
	names    []string
	pool     *pgxpool.Pool
	schema   func(ctx context.Context) (current, expected int64, err error)
	interval time.Duration // re-check period once ready
	logger   *slog.Logger
	ready    atomic.Bool // read by /healthz

	mu      sync.Mutex
	stopped bool
}

func (r *readiness) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if r.pool != nil {
		if err := r.pool.Ping(ctx); err != nil {
			return fmt.Errorf("database ping: %w", err)
		}
	}
	if r.schema != nil {
		cur, want, err := r.schema(ctx)
		if err != nil {
			return fmt.Errorf("schema version: %w", err)
		}
		if cur != want {
			return fmt.Errorf("schema at version %d, this binary needs %d (run migrate)", cur, want)
		}
	}
	return nil
}

// shutdown turns everything NOT_SERVING for good: a check finishing after shutdown began
// must not flip /healthz back to ready.
func (r *readiness) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.ready.Store(false)
	r.hs.Shutdown()
}

func (r *readiness) set(serving bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	r.ready.Store(serving)
	for _, n := range r.names {
		r.hs.SetServingStatus(n, st)
	}
}

// run polls until ctx ends. It logs on every change of state or reason only, so a replica
// waiting for migrate writes one line, not two a second.
func (r *readiness) run(ctx context.Context) {
	r.set(false)
	lastReason := ""
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.check(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && !r.ready.Load():
			r.logger.Info("ready: serving")
			r.set(true)
			lastReason = ""
		case err != nil && (r.ready.Load() || err.Error() != lastReason):
			r.logger.Warn("not ready", "reason", err.Error())
			r.set(false)
			lastReason = err.Error()
		}
		next := readyPoll
		if r.ready.Load() {
			next = r.interval
		}
		t.Reset(next)
	}
}
