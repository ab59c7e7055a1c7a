package gw

import (
	"flag"
	"time"

	"github.com/millwright/millwright/pkg/server"
)

// Config is the gateway's configuration: flags, each with an environment fallback (the same
// rule as the services: a flag beats its environment variable, which beats the default).
type Config struct {
	HTTPAddr        string
	Upstreams       Upstreams
	ShutdownTimeout time.Duration
	LogLevel        string
}

// RegisterFlags binds the configuration to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	server.StringVar(fs, &c.HTTPAddr, "http-addr", "MILLWRIGHT_HTTP_ADDR", ":8080", "HTTP listen address")
	server.StringVar(fs, &c.Upstreams.Policy, "policy-addr", "MILLWRIGHT_POLICY_ADDR", "127.0.0.1:50051", "policy gRPC address")
	server.StringVar(fs, &c.Upstreams.Roleset, "roleset-addr", "MILLWRIGHT_ROLESET_ADDR", "127.0.0.1:50052", "roleset gRPC address")
	server.StringVar(fs, &c.Upstreams.Billing, "billing-addr", "MILLWRIGHT_BILLING_ADDR", "127.0.0.1:50053", "billing gRPC address")
	server.DurationVar(fs, &c.ShutdownTimeout, "shutdown-timeout", "MILLWRIGHT_SHUTDOWN_TIMEOUT", 10*time.Second, "time allowed for in-flight requests on SIGTERM")
	server.StringVar(fs, &c.LogLevel, "log-level", "MILLWRIGHT_LOG_LEVEL", "info", "debug, info, warn or error")
}
