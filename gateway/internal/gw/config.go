package gw

import (
	"errors"
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
	Limits          Limits
}

// Limits bound what one HTTP client can hold of the gateway: a connection that sends its
// headers, its body or reads its answer slower than these, or idles longer, is cut, so that
// unauthenticated clients cannot keep connections and goroutines open at will.
type Limits struct {
	// ReadHeaderTimeout: the request line and headers must arrive within it (slowloris).
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (431 past it).
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request body (413: at once when Content-Length says so, else as
	// soon as that many bytes have been read).
	MaxBodyBytes int
	// BodyReadTimeout: the whole body must arrive within it of the end of the headers
	// (408 past it), so a body trickled a byte at a time is cut.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds each write of the answer (a client that stops reading is cut); it
	// is per write, not per answer, so a server-streaming answer (Watch) may last.
	WriteTimeout time.Duration
	// IdleTimeout: a keep-alive connection with no request is closed after it.
	IdleTimeout time.Duration
}

// DefaultLimits are the gateway's defaults (docs/operations.md, "Gateway limits").
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		// The largest message the services accept (server.MaxRecvMsgSize): their own limits
		// (a builder document's 3 MiB) answer below it, naming the field.
		MaxBodyBytes:    server.MaxRecvMsgSize,
		BodyReadTimeout: 30 * time.Second,
		WriteTimeout:    30 * time.Second,
		IdleTimeout:     60 * time.Second,
	}
}

// RegisterFlags binds the configuration to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultLimits()
	server.StringVar(fs, &c.HTTPAddr, "http-addr", "MILLWRIGHT_HTTP_ADDR", ":8080", "HTTP listen address")
	server.StringVar(fs, &c.Upstreams.Policy, "policy-addr", "MILLWRIGHT_POLICY_ADDR", "127.0.0.1:50051", "policy gRPC address")
	server.StringVar(fs, &c.Upstreams.Roleset, "roleset-addr", "MILLWRIGHT_ROLESET_ADDR", "127.0.0.1:50052", "roleset gRPC address")
	server.StringVar(fs, &c.Upstreams.Billing, "billing-addr", "MILLWRIGHT_BILLING_ADDR", "127.0.0.1:50053", "billing gRPC address")
	server.DurationVar(fs, &c.ShutdownTimeout, "shutdown-timeout", "MILLWRIGHT_SHUTDOWN_TIMEOUT", 10*time.Second, "time allowed for in-flight requests on SIGTERM")
	server.StringVar(fs, &c.LogLevel, "log-level", "MILLWRIGHT_LOG_LEVEL", "info", "debug, info, warn or error")
	server.DurationVar(fs, &c.Limits.ReadHeaderTimeout, "read-header-timeout", "MILLWRIGHT_HTTP_READ_HEADER_TIMEOUT", d.ReadHeaderTimeout, "time allowed for a request's line and headers")
	server.IntVar(fs, &c.Limits.MaxHeaderBytes, "max-header-bytes", "MILLWRIGHT_HTTP_MAX_HEADER_BYTES", d.MaxHeaderBytes, "largest request line and headers, in bytes (431 past it)")
	server.IntVar(fs, &c.Limits.MaxBodyBytes, "max-body-bytes", "MILLWRIGHT_HTTP_MAX_BODY_BYTES", d.MaxBodyBytes, "largest request body, in bytes (413 past it)")
	server.DurationVar(fs, &c.Limits.BodyReadTimeout, "body-read-timeout", "MILLWRIGHT_HTTP_BODY_READ_TIMEOUT", d.BodyReadTimeout, "time allowed for a whole request body, from the end of its headers (408 past it)")
	server.DurationVar(fs, &c.Limits.WriteTimeout, "write-timeout", "MILLWRIGHT_HTTP_WRITE_TIMEOUT", d.WriteTimeout, "time allowed for each write of an answer to a client")
	server.DurationVar(fs, &c.Limits.IdleTimeout, "idle-timeout", "MILLWRIGHT_HTTP_IDLE_TIMEOUT", d.IdleTimeout, "an idle keep-alive connection is closed after this")
}

// Validate refuses a zero or negative limit: each one is what stands between a client and an
// unbounded hold on the gateway, so "off" is not an option.
func (l Limits) Validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		v    int64
	}{
		{"--read-header-timeout", int64(l.ReadHeaderTimeout)}, {"--max-header-bytes", int64(l.MaxHeaderBytes)},
		{"--max-body-bytes", int64(l.MaxBodyBytes)}, {"--body-read-timeout", int64(l.BodyReadTimeout)},
		{"--write-timeout", int64(l.WriteTimeout)}, {"--idle-timeout", int64(l.IdleTimeout)},
	} {
		if c.v <= 0 {
			errs = append(errs, errors.New(c.flag+" must be positive"))
		}
	}
	return errors.Join(errs...)
}
