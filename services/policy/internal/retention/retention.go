package retention

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/millwright/millwright/services/policy/internal/store"
)

// Defaults.
const (
	DefaultRuns     = 14 * 24 * time.Hour
	DefaultTokens   = 14 * 24 * time.Hour
	DefaultInterval = time.Hour
	// Weekly partitions: about Runs/7 + 2 of them at any time (the planner and the token and run
	// lookups pay per partition), created at least a week ahead.
	DefaultPartitionDays = 7
	DefaultAhead         = 7 * 24 * time.Hour
	// Margin is how much longer than the job token lifetime the run retention must be: a run
	// is removed with its partition once the partition's range ended Runs ago, so every run
	// in it started more than Runs ago; the margin covers clock skew between service
	// (which sets a job token's expiry) and database (which sets the run's start).
	Margin = 24 * time.Hour
)

// Store is what the loop needs of the store.
type Store interface {
	Maintain(ctx context.Context, now time.Time, r store.Retention) (store.MaintainResult, error)
}

// Maintainer runs maintenance passes.
type Maintainer struct {
	Store     Store
	Retention store.Retention
	// JobTokenTTL is the longest a job token authenticates; Retention.Runs must exceed it by
	// Margin, so a dropped partition never holds a live run.
	JobTokenTTL time.Duration
	Interval    time.Duration
	Clock       func() time.Time
	// Logger; nil logs to slog.Default() as it is when a pass ends (pkg/server sets it).
	Logger *slog.Logger

	passed, skipped, failed atomic.Int64
	lastPassed              atomic.Int64 // unix seconds of the clock at the last pass that ran
}

// Check refuses a retention that could remove a run that may still authenticate.
func (m *Maintainer) Check() error {
	if m.Retention.Runs < m.JobTokenTTL+Margin {
		return fmt.Errorf("policy: run retention %s must be at least the job token lifetime %s + %s",
			m.Retention.Runs, m.JobTokenTTL, Margin)
	}
	if m.Retention.Tokens <= 0 {
		return fmt.Errorf("policy: token retention %s must be positive", m.Retention.Tokens)
	}
	return nil
}

// Once runs one pass at the clock's time.
func (m *Maintainer) Once(ctx context.Context) (store.MaintainResult, error) {
	if err := m.Check(); err != nil {
		return store.MaintainResult{}, err
	}
	now := m.Clock()
	res, err := m.Store.Maintain(ctx, now, m.Retention)
	switch {
	case err != nil:
		m.failed.Add(1)
	case res.Skipped:
		m.skipped.Add(1)
	default:
		m.passed.Add(1)
		m.lastPassed.Store(now.Unix())
	}
	return res, err
}

// Collectors exports the passes for Prometheus. Alert when no replica passed for a day
// (time() - max(millwright_policy_retention_last_pass_timestamp_seconds) > 86400): the
// partitions are made a week ahead, and RecordRun fails once they run out.
func (m *Maintainer) Collectors() []prometheus.Collector {
	passes := func(result string, n *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_policy_retention_passes_total",
			ConstLabels: prometheus.Labels{"result": result},
			Help:        "Retention maintenance passes of this replica: ran (ok), left to another replica (skipped), failed."},
			func() float64 { return float64(n.Load()) })
	}
	return []prometheus.Collector{
		passes("ok", &m.passed), passes("skipped", &m.skipped), passes("failed", &m.failed),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "millwright_policy_retention_last_pass_timestamp_seconds",
			Help: "When this replica last ran a retention pass to the end (0: never)."},
			func() float64 { return float64(m.lastPassed.Load()) }),
	}
}

// Run runs a pass now and then every Interval until ctx ends. A failed pass is logged and
// retried at the next tick (the partitions are created a week ahead, so a few failed passes
// cost nothing); it never stops the service.
func (m *Maintainer) Run(ctx context.Context) error {
	if err := m.Check(); err != nil {
		return err
	}
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		res, err := m.Once(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			m.log().Error("policy maintenance failed", "error", err)
		case err == nil && !res.Skipped && (len(res.Created)+len(res.Dropped) > 0 || res.UserTokens > 0):
			m.log().Info("policy maintenance", "created", res.Created, "dropped", res.Dropped, "user_tokens_deleted", res.UserTokens)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *Maintainer) log() *slog.Logger {
	if m.Logger != nil {
		return m.Logger
	}
	return slog.Default()
}
