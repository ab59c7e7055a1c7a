package app

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/policyclient"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/roleset/internal/api"
	"github.com/millwright/millwright/services/roleset/internal/engine"
	"github.com/millwright/millwright/services/roleset/internal/policyidentity"
	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/migrations"
)

// Config is roleset's configuration: the common server flags plus its own.
type Config struct {
	server.Config
	InstanceID    string
	EncryptionKey server.Secret
	PolicyAddr    string
	Iterations    int
	SweepInterval time.Duration
	CacheTTL      time.Duration
	// The PostgreSQL proxy of run-scoped tickets (docs/design.md); off while ProxyAddr is "".
	ProxyAddr, ProxyAdvertise, ProxyTLSCert, ProxyTLSKey string
	TicketLifetime                                       time.Duration
}

// Commands are roleset's subcommands: serve and migrate (pkg/server's lifecycle), and devcert.
func Commands() []cli.Command {
	return append(server.Commands("roleset", "serve the roleset gRPC API and follow policy's stream",
		func() server.Service { return new(Config) }, Migrate), devCertCommand())
}

// RegisterFlags defines roleset's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, server.Config{Name: "roleset", GRPCAddr: ":50052", MetricsAddr: ":9092"})
	server.StringVar(fs, &c.InstanceID, "instance-id", "MILLWRIGHT_INSTANCE_ID", "", "this instance's id (hashed into every wm_set_ login name)")
	server.SecretVar(fs, &c.EncryptionKey, "encryption-key", "MILLWRIGHT_ENCRYPTION_KEY", "", "AES-256 key ring: id:base64[,id:base64] (first encrypts)")
	server.StringVar(fs, &c.PolicyAddr, "policy-addr", "MILLWRIGHT_POLICY_ADDR", "127.0.0.1:50051", "policy gRPC address")
	server.IntVar(fs, &c.Iterations, "scram-iterations", "MILLWRIGHT_SCRAM_ITERATIONS", secret.DefaultIterations, "PBKDF2 iterations of new login verifiers")
	server.DurationVar(fs, &c.SweepInterval, "sweep-interval", "MILLWRIGHT_SWEEP_INTERVAL", 10*time.Minute, "monitor loop period (sweep + reconcile)")
	server.DurationVar(fs, &c.CacheTTL, "cache-ttl", "MILLWRIGHT_CACHE_TTL", 5*time.Minute, "upper bound on a cached answer's age (events drop them sooner)")
	server.StringVar(fs, &c.ProxyAddr, "proxy-addr", "MILLWRIGHT_PROXY_ADDR", "", "listen address of the PostgreSQL proxy for data tables in proxy mode (empty: no proxy)")
	server.StringVar(fs, &c.ProxyAdvertise, "proxy-advertise", "MILLWRIGHT_PROXY_ADVERTISE", "", "host:port that ResolveConnection answers for the proxy (default: --proxy-addr)")
	server.StringVar(fs, &c.ProxyTLSCert, "proxy-tls-cert", "MILLWRIGHT_PROXY_TLS_CERT", "", "PEM certificate file the proxy offers TLS with (with --proxy-tls-key)")
	server.StringVar(fs, &c.ProxyTLSKey, "proxy-tls-key", "MILLWRIGHT_PROXY_TLS_KEY", "", "PEM private key file of --proxy-tls-cert")
	server.DurationVar(fs, &c.TicketLifetime, "ticket-lifetime", "MILLWRIGHT_TICKET_LIFETIME", 24*time.Hour, "longest life of a proxy ticket, even while its run goes on")
}

// proxyConfig checks the proxy flags: where clients are told to connect, and the TLS to offer.
func (c *Config) proxyConfig() (engine.ProxyConfig, *tls.Config, error) {
	if c.ProxyAddr == "" {
		return engine.ProxyConfig{}, nil, nil
	}
	adv := c.ProxyAdvertise
	if adv == "" {
		adv = c.ProxyAddr
	}
	host, port, err := net.SplitHostPort(adv)
	if err != nil || host == "" {
		return engine.ProxyConfig{}, nil, cli.Usagef("--proxy-advertise %q: want host:port (set it when --proxy-addr has no host)", adv)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return engine.ProxyConfig{}, nil, cli.Usagef("--proxy-advertise %q: bad port", adv)
	}
	var tlsCfg *tls.Config
	switch {
	case c.ProxyTLSCert != "" && c.ProxyTLSKey != "":
		cert, err := tls.LoadX509KeyPair(c.ProxyTLSCert, c.ProxyTLSKey)
		if err != nil {
			return engine.ProxyConfig{}, nil, cli.Usagef("proxy TLS: %v", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	case c.ProxyTLSCert != "" || c.ProxyTLSKey != "":
		return engine.ProxyConfig{}, nil, cli.Usagef("--proxy-tls-cert and --proxy-tls-key go together")
	}
	return engine.ProxyConfig{Host: host, Port: p, TicketLifetime: c.TicketLifetime}, tlsCfg, nil
}

// Serve is the serve subcommand: flags from args, then the service until ctx ends.
func Serve(ctx context.Context, args []string) error {
	return server.ServeArgs(ctx, new(Config), args)
}

// Complete validates the configuration, opens the database pool and dials policy, then builds
// the service.
func (cfg *Config) Complete(ctx context.Context, cl *server.Closers) (server.Runner, error) {
	if cfg.InstanceID == "" {
		return nil, cli.Usagef("--instance-id is required")
	}
	keys, err := secret.ParseKeyring(cfg.EncryptionKey.Reveal())
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	proxyCfg, proxyTLS, err := cfg.proxyConfig()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL.Reveal())
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	cl.Push(pool.Close)
	own := stream.New(pool, stream.Options{})
	cc, err := server.Dial(ctx, cfg.PolicyAddr, cfg.ServiceToken.Reveal())
	if err != nil {
		return nil, err
	}
	cl.Push(func() { _ = cc.Close() })
	pol := policyidentity.New(cc)
	logger, err := server.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	// Bearer tokens: tokens.After (api refuses user and job tokens on every RPC that is not
	// public).
	tokens := policyclient.New(cc, policyclient.Options{Logger: logger.With("service", "roleset")})
	var fol *stream.LiveFollower
	// Cached answers only while both streams are connected and caught up: roleset's own (role
	// disabled on another replica) and policy's (membership, run end).
	cache := engine.NewCache(cfg.CacheTTL, 100_000, func() bool { return own.Live() && fol.Live() })
	// The audit trail (docs/roleset.md, "Audit trail"): server.Run closes it, writing the
	// repeats it still counts; the closer (a no-op then) stops it if Run never starts, before
	// the pool closes.
	rec, err := cfg.Audit.NewRecorder("roleset", pool, logger.With("service", "roleset"))
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	cl.Push(rec.Close)
	var sweeps SweepCounts
	st := newStore(pool)
	eng := engine.New(engine.Config{InstanceID: cfg.InstanceID, Keys: keys, Iterations: cfg.Iterations, Proxy: proxyCfg}, st, pol, cache)
	cl.Push(eng.Close)
	background := []func(context.Context) error{}
	var proxyMetrics []prometheus.Collector
	if cfg.ProxyAddr != "" {
		ln, err := net.Listen("tcp", cfg.ProxyAddr)
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		plog := logger.With("component", "pgproxy")
		px := NewProxy(eng, st, proxyTLS, plog, rec)
		cl.Push(func() { _ = px.Close() })
		var rj RejudgeCounts
		proxyMetrics = proxyCollectors(px, &rj)
		background = append(background, func(ctx context.Context) error {
			go func() { <-ctx.Done(); _ = px.Close() }()
			if err := px.Serve(ln); err != nil && ctx.Err() == nil {
				return fmt.Errorf("proxy: %w", err)
			}
			return nil
		}, func(ctx context.Context) error { return Rejudge(ctx, eng, px, plog, &rj, 0) })
	}
	fol = pol.Follower(eng, logger.With("service", "roleset"))
	own.Subscribe(func(stream.Event) { eng.DropConnections() })
	h := &api.Server{Engine: eng, Stream: own, Audit: rec}
	schema, err := migrate.SchemaCheck(pool, migrations.FS)
	if err != nil {
		return nil, err
	}
	reg := server.NewRegistry()
	reg.MustRegister(own.Collectors("roleset")...)
	reg.MustRegister(server.CacheCollectors("roleset_connections", eng.ConnectionCacheStats)...)
	reg.MustRegister(sweepCollectors(&sweeps)...)
	reg.MustRegister(tokens.Collectors("roleset")...)
	reg.MustRegister(proxyMetrics...)
	return func(ctx context.Context) error {
		return server.Run(ctx, cfg.Config, server.Options{
			Registry:      reg,
			Pool:          pool,
			SchemaVersion: schema,
			Authenticator: tokens.After(cfg.StaticTokens()),
			Public:        api.PublicMethods,
			Validator:     api.Validators(),
			Register:      h.Register,
			Audit:         rec,
			AuditRules:    api.AuditRules(),
			Background: append([]func(context.Context) error{
				own.Run,
				fol.Run,
				tokens.Run,
				func(ctx context.Context) error { return Monitor(ctx, eng, cfg.SweepInterval, slog.Default(), &sweeps) },
			}, background...),
		})
	}, nil
}

// SweepCounts are the monitor loop's running totals (metrics).
type SweepCounts struct{ Runs, Failed, Dropped, Resumed atomic.Int64 }

func sweepCollectors(c *SweepCounts) []prometheus.Collector {
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		counter("millwright_roleset_sweeps_total", "Sweeps run by the monitor loop.", &c.Runs),
		counter("millwright_roleset_sweep_failures_total", "Sweeps of the monitor loop that returned an error.", &c.Failed),
		counter("millwright_roleset_sweep_dropped_total", "Set logins the monitor loop's sweeps dropped (unused for 30 days).", &c.Dropped),
		counter("millwright_roleset_sweep_resumed_total", "Interrupted retires the monitor loop's sweeps finished.", &c.Resumed),
	}
}

// Monitor runs the sweep (which also reconciles and finishes interrupted retires) every
// interval, on every replica: it is safe concurrently. counts, if not nil, gets its totals.
func Monitor(ctx context.Context, eng *engine.Engine, every time.Duration, log *slog.Logger, counts *SweepCounts) error {
	if counts == nil {
		counts = &SweepCounts{}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		res, err := eng.Sweep(ctx)
		counts.Runs.Add(1)
		counts.Dropped.Add(res.Dropped)
		counts.Resumed.Add(res.Resumed)
		if err != nil && !errors.Is(err, context.Canceled) {
			counts.Failed.Add(1)
			log.Warn("roleset: sweep", "err", err)
		} else if res.Dropped+res.Resumed > 0 {
			log.Info("roleset: sweep", "dropped", res.Dropped, "resumed", res.Resumed)
		}
		// Expired proxy tickets are removed on the same loop, so the table holds live ones only.
		if n, err := eng.DeleteExpiredTickets(ctx, time.Now()); err != nil && !errors.Is(err, context.Canceled) {
			counts.Failed.Add(1)
			log.Warn("roleset: removing expired tickets", "err", err)
		} else if n > 0 {
			log.Info("roleset: removed expired tickets", "tickets", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Migrate applies the embedded migrations.
func Migrate(ctx context.Context, dsn string) (int64, error) {
	return migrate.Up(ctx, dsn, migrations.FS)
}
