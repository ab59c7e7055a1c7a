package gw

import (
	"flag"
	"os"
	"time"
)

// Config is the gateway's configuration: flags, each with an environment fallback.
type Config struct {
	HTTPAddr        string
	Upstreams       Upstreams
	ShutdownTimeout time.Duration
}

// RegisterFlags binds the configuration to fs; a flag beats its environment variable, which
// beats the default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	str := func(p *string, name, env, def, usage string) {
		if v, ok := os.LookupEnv(env); ok {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+env+")")
	}
	str(&c.HTTPAddr, "http-addr", "MILLWRIGHT_HTTP_ADDR", ":8080", "HTTP listen address")
	str(&c.Upstreams.Policy, "policy-addr", "MILLWRIGHT_POLICY_ADDR", "127.0.0.1:50051", "policy gRPC address")
	str(&c.Upstreams.Roleset, "roleset-addr", "MILLWRIGHT_ROLESET_ADDR", "127.0.0.1:50052", "roleset gRPC address")
	str(&c.Upstreams.Billing, "billing-addr", "MILLWRIGHT_BILLING_ADDR", "127.0.0.1:50053", "billing gRPC address")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "time allowed for in-flight requests on SIGTERM")
}
