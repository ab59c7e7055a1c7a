package server

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process collectors, the
// one Run uses when Options.Registry is nil. Services that add metrics of their own create it
// themselves, register on it and pass it in Options.Registry.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

type metrics struct {
	requests *prometheus.CounterVec   // method, code
	latency  *prometheus.HistogramVec // method; unary only
	refusals *prometheus.CounterVec   // method, reason
	panics   *prometheus.CounterVec   // method
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "millwright_grpc_requests_total",
			Help: "gRPC calls handled, by full method and status code.",
		}, []string{"method", "code"}),
		// Unary only: a server-streaming call's duration is how long the consumer stayed
		// connected, which would swamp the latency of everything else.
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "millwright_grpc_request_duration_seconds",
			Help:    "Latency of unary gRPC calls, by full method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "millwright_grpc_refusals_total",
			Help: "gRPC calls answered with a google.rpc.ErrorInfo, by full method and reason.",
		}, []string{"method", "reason"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "millwright_grpc_panics_total",
			Help: "Handler panics recovered, by full method.",
		}, []string{"method"}),
	}
	var err error
	m.requests, err = register(reg, m.requests)
	if err == nil {
		m.latency, err = register(reg, m.latency)
	}
	if err == nil {
		m.refusals, err = register(reg, m.refusals)
	}
	if err == nil {
		m.panics, err = register(reg, m.panics)
	}
	return m, err
}

// register adopts an identical collector already registered, so two servers in one process
// (tests, or one binary serving two listeners) can share a registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// CacheCollectors exports a cache's lookups as millwright_cache_lookups_total{cache=name,
// result=hit|miss}; stats returns the running counts. The hit rate is what shows whether a
// warm path stays warm (a rate near 0 with a live stream means entries are being dropped).
func CacheCollectors(name string, stats func() (hits, misses uint64)) []prometheus.Collector {
	counter := func(result string, pick func(h, m uint64) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_cache_lookups_total",
			Help:        "Cache lookups, by cache and result (hit or miss; a lookup while the stream is not live is a miss).",
			ConstLabels: prometheus.Labels{"cache": name, "result": result}},
			func() float64 { return float64(pick(stats())) })
	}
	return []prometheus.Collector{
		counter("hit", func(h, _ uint64) uint64 { return h }),
		counter("miss", func(_, m uint64) uint64 { return m }),
	}
}
