package policyclient

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/millwright/millwright/pkg/auth"
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

// After is how a service other than policy authenticates bearer tokens: its two config tokens
// first (they never need policy, so the operator and the platform keep working while policy is
// away), then policy's user and job tokens through a, cached per process and dropped by
// policy's stream on revoke. The services refuse user and job tokens on their admin RPCs;
// those authenticate so that the refusal is a PermissionDenied naming the rule, and a revoked
// token an Unauthenticated.
func (a *Authenticator) After(config auth.Static) auth.Chain { return auth.Chain{config, a} }
