package policyclient

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/millwright/millwright/pkg/server"
)

// Collectors are the metrics of a service's token cache: lookups by result
// (millwright_cache_lookups_total{cache="tokens"}) and how many policy tokens the process has
// cached (millwright_<svc>_token_cache_entries: what a revoke has to reach).
func (a *Authenticator) Collectors(svc string) []prometheus.Collector {
	return append(server.CacheCollectors("tokens", a.Stats),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "millwright_" + svc + "_token_cache_entries",
			Help: "Policy-issued tokens (user, job) whose identity this process has cached."},
			func() float64 { return float64(a.Len()) }))
}
