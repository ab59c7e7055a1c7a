package audit

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are the recorder's figures for Prometheus (Collectors).
type counters struct {
	written  atomic.Uint64 // events appended
	repeats  atomic.Uint64 // decisions counted in a repeat window instead of written
	failures atomic.Uint64 // group commits that failed (each refused its fail-closed calls)
}

// Collectors exports the recorder's figures: events written, repeats folded into a count, and
// failed writes. Failed writes that climb are what to alert on: fail-closed calls are being
// refused, fail-open ones answered unrecorded (docs/operations.md, "The audit trail").
func (r *Recorder) Collectors() []prometheus.Collector {
	l := prometheus.Labels{"service": r.cfg.Service}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_audit_events_written_total", ConstLabels: l,
			Help: "Audit events appended to the trail."}, func() float64 { return float64(r.n.written.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_audit_repeats_total", ConstLabels: l,
			Help: "Decisions identical to one recorded within the repeat window, counted instead of written."},
			func() float64 { return float64(r.n.repeats.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_audit_write_failures_total", ConstLabels: l,
			Help: "Writes to the audit trail that failed; fail-closed calls were refused."},
			func() float64 { return float64(r.n.failures.Load()) }),
	}
}
