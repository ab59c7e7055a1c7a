package stream

import "github.com/prometheus/client_golang/prometheus"

// Collectors exports the listener's state for Prometheus, labelled stream=name: whether it is
// live (caches answer from their entries only then), the last event id delivered, and how
// often its connection was lost or it had to tell subscribers to resync. A live of 0 that
// stays, or reconnects climbing, is what to alert on.
func (s *Stream) Collectors(name string) []prometheus.Collector {
	l := prometheus.Labels{"stream": name}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "millwright_stream_live", ConstLabels: l,
			Help: "1 while the stream listener is connected and caught up, else 0."}, func() float64 {
			if s.Live() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "millwright_stream_position", ConstLabels: l,
			Help: "Id of the last stream event delivered to this process's subscribers."},
			func() float64 { return float64(s.Position()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_stream_reconnects_total", ConstLabels: l,
			Help: "Stream listener connections lost (each followed by a reconnect and a catch-up)."},
			func() float64 { return float64(s.reconnects.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_stream_resyncs_total", ConstLabels: l,
			Help: "Times the listener fell behind the retention window and told subscribers to resync."},
			func() float64 { return float64(s.resyncs.Load()) }),
	}
}
