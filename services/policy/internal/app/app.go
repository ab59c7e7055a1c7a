package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/defaults"
	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/api"
	"github.com/millwright/millwright/services/policy/internal/authn"
	"github.com/millwright/millwright/services/policy/internal/retention"
	"github.com/millwright/millwright/services/policy/internal/settings"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/migrations"
)

// Config is policy's configuration: the common server flags, where billing is, and the
// service's knobs (Options, which also holds the hooks tests set).
type Config struct {
	server.Config
	Billing BillingConfig
	Options
}

// Commands are policy's subcommands: serve and migrate (pkg/server's lifecycle).
func Commands() []cli.Command {
	return server.Commands("policy", "serve the policy gRPC API",
		func() server.Service { return new(Config) }, Migrate)
}

// RegisterFlags defines policy's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, server.Config{Name: "policy", GRPCAddr: ":50051", MetricsAddr: ":9091"})
	RegisterBillingFlags(fs, &c.Billing) // seat check wiring: seats.go
	RegisterRetentionFlags(fs, &c.Retention)
	fs.Int64Var(&c.CheckBytesInFlight, "check-bytes-in-flight", api.DefaultCheckBytesInFlight,
		"builder checks running at once, in bytes of documents (each weighted by its size + 64 KiB); beyond it a check queues")
	fs.DurationVar(&c.CheckQueueWait, "check-queue-wait", 2*time.Second,
		"how long a builder check queues for room before ResourceExhausted OVERLOADED")
}

// Complete validates the configuration and dials billing (the seat checker), then builds the
// service.
func (c *Config) Complete(ctx context.Context, cl *server.Closers) (server.Runner, error) {
	seats, closeBilling, err := DialBilling(ctx, c.Billing, c.ServiceToken.Reveal())
	if errors.Is(err, ErrNoBillingAddr) {
		return nil, cli.Usagef("%v", err)
	}
	if err != nil {
		return nil, err
	}
	cl.Push(func() { _ = closeBilling.Close() })
	if c.Billing.None {
		slog.Warn("running without billing (--no-billing): builder rights and member writes are not priced, no seat cap is enforced")
	}
	if c.CheckBytesInFlight <= 0 || c.CheckQueueWait <= 0 {
		return nil, cli.Usagef("--check-bytes-in-flight and --check-queue-wait must be positive")
	}
	o := c.Options
	o.SeatChecker = seats
	return start(ctx, c.Config, o, cl)
}

// Options are the service's knobs beyond server.Config.
type Options struct {
	// SeatChecker prices changes that may add seats (builder on, member writes); nil skips
	// the check.
	SeatChecker settings.SeatChecker
	// BuilderTTL is the builder-flag cache lifetime (default 60 s).
	BuilderTTL time.Duration
	// TokenTTL is the token cache lifetime (default 60 s).
	TokenTTL time.Duration
	// JobTokenTTL bounds a job token whose run never finishes (default 7 days).
	JobTokenTTL time.Duration
	// Retention of runs and tokens (zero fields: internal/retention's defaults) and the
	// maintenance loop's interval (default 1 h) and clock (default time.Now; tests move it).
	Retention           store.Retention
	MaintenanceInterval time.Duration
	Clock               func() time.Time
	// CheckBytesInFlight and CheckQueueWait bound the builder checks running at once (see
	// api.Deps; defaults 64 MiB of documents, 2 s of queueing before ResourceExhausted).
	CheckBytesInFlight int64
	CheckQueueWait     time.Duration
	// Stream tunes the listener.
	Stream stream.Options
	// OnListen and Logger are passed to pkg/server.
	OnListen func(grpcAddr, metricsAddr string)
	Logger   *slog.Logger
	// OnReady, if set, receives the wired parts once built (tests).
	OnReady func(*Parts)
	// Tracer, if set, traces every query of the pool (tests count the builder's queries).
	Tracer pgx.QueryTracer
}

// Parts are the service's wired components.
type Parts struct {
	Store    *store.Store
	Stream   *stream.Stream
	Settings *settings.Service
	Authn    *authn.Local
	// Maintainer is the retention loop (tests run passes with Once at a clock they move).
	Maintainer *retention.Maintainer
}

// defaultMaxConns is the pool size when DATABASE_URL sets none: enough to keep commits of the
// job path in flight together (PostgreSQL groups their WAL flushes). Three replicas take 3 x
// (24 + jobPoolConns + the listener) = 99 connections, so they and the other services need
// more than PostgreSQL's default max_connections = 100 (docs/operations.md).
const defaultMaxConns = 24

// jobPoolConns is the job path's pool: two kinds of statement, up to 4 batches of each in flight.
const jobPoolConns = 8

// Run serves the policy service until ctx ends, with o as given (zero knobs take their
// defaults, o.SeatChecker as is): tests and embedders that wire their own seat checker.
func Run(ctx context.Context, cfg server.Config, o Options) error {
	return server.Serve(ctx, server.CompleteFunc(func(ctx context.Context, cl *server.Closers) (server.Runner, error) {
		return start(ctx, cfg, o, cl)
	}))
}

// start opens the database pool and builds the service's parts; what it acquires is released
// through cl.
func start(ctx context.Context, cfg server.Config, o Options, cl *server.Closers) (server.Runner, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL.Reveal())
	if err != nil {
		return nil, fmt.Errorf("policy: database: %w", err)
	}
	// pgx prepares and caches every statement; after five executions Postgres may switch a
	// prepared statement to a generic plan, and for the catalog's RLS-filtered array joins
	// (ReadablePaths, PinnedVersions: up to thousands of refs) the generic plan is two orders of
	// magnitude slower (300 ms instead of 5 ms for 1,000 paths, measured). Custom plans cost a
	// planning pass per statement, which these short queries do not notice.
	if _, set := pcfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		pcfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	// pgxpool's default (4 connections on 2 cores) made the job path wait for a connection:
	// each RecordRun and FinishRun holds one through a durable COMMIT, which is I/O, not CPU,
	// so 64 callers queued behind 4 commits (docs/benchmarks.md, job path). pool_max_conns in
	// DATABASE_URL still wins.
	if !strings.Contains(cfg.DatabaseURL.Reveal(), "pool_max_conns") {
		pcfg.MaxConns = defaultMaxConns
	}
	if o.Tracer != nil {
		pcfg.ConnConfig.Tracer = o.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("policy: database: %w", err)
	}
	cl.Push(pool.Close)
	// The job path (RecordRun, FinishRun) runs on its own few connections with its own plan
	// settings (store.JobSessionParams). Group commit (store/batch.go) keeps at most 4 batches
	// of each in flight, so 8 connections suffice.
	jcfg := pcfg.Copy()
	maps.Copy(jcfg.ConnConfig.RuntimeParams, store.JobSessionParams())
	jcfg.MaxConns, jcfg.MinConns = jobPoolConns, 0
	jobs, err := pgxpool.NewWithConfig(ctx, jcfg)
	if err != nil {
		return nil, fmt.Errorf("policy: database: %w", err)
	}
	cl.Push(jobs.Close)

	st := stream.New(pool, o.Stream)
	db := store.New(pool)
	db.SetJobPool(jobs)
	maint := maintainer(db, o)
	if err := maint.Check(); err != nil {
		return nil, err
	}
	ready := func() bool {
		select {
		case <-st.Ready():
			return true
		default:
			return false
		}
	}
	// The caches answer from their entries only while the listener is connected and caught
	// up (st.Live): during a listener outage a revoke may be committed unseen, so every check
	// reads the database until the stream has delivered it.
	set := settings.New(db, o.SeatChecker, o.BuilderTTL, st.Live)
	local := authn.New(db, o.TokenTTL, st.Live)
	unsub := st.Subscribe(func(e stream.Event) {
		set.OnEvent(e)
		local.OnEvent(e)
	})
	cl.Push(unsub)
	if o.OnReady != nil {
		o.OnReady(&Parts{Store: db, Stream: st, Settings: set, Authn: local, Maintainer: maint})
	}

	expected, err := migrate.Expected(migrations.FS)
	if err != nil {
		return nil, err
	}
	rec, err := cfg.Audit.NewRecorder("policy", pool, o.Logger)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	reg := server.NewRegistry()
	reg.MustRegister(st.Collectors("policy")...)
	reg.MustRegister(server.CacheCollectors("builder_flags", set.CacheStats)...)
	reg.MustRegister(server.CacheCollectors("tokens", local.CacheStats)...)
	reg.MustRegister(maint.Collectors()...)
	return func(ctx context.Context) error {
		return server.Run(ctx, cfg, server.Options{
			Registry: reg,
			Pool:     pool,
			SchemaVersion: func(ctx context.Context) (int64, int64, error) {
				cur, err := migrate.Current(ctx, pool)
				if err != nil {
					return 0, expected, err
				}
				// Caches are only honest once the stream listener delivers: not SERVING before.
				if !ready() {
					return cur, expected, fmt.Errorf("policy: stream listener not connected yet")
				}
				return cur, expected, nil
			},
			Authenticator: auth.Chain{
				cfg.StaticTokens(),
				local,
			},
			Validator: api.Validators(),
			Register: func(gs *grpc.Server) {
				api.Register(gs, api.Deps{Store: db, Settings: set, Stream: st, JobTokenTTL: o.JobTokenTTL,
					CheckBytesInFlight: o.CheckBytesInFlight, CheckQueueWait: o.CheckQueueWait, AuditHasher: rec.Hasher()})
			},
			Audit:      rec,
			AuditRules: api.AuditRules(),
			Background: []func(context.Context) error{st.Run, maint.Run},
			OnListen:   o.OnListen,
			Logger:     o.Logger,
		})
	}, nil
}

// maintainer fills in the defaults of the retention loop.
func maintainer(db *store.Store, o Options) *retention.Maintainer {
	r := o.Retention
	r.Runs = defaults.Positive(r.Runs, retention.DefaultRuns)
	r.Tokens = defaults.Positive(r.Tokens, retention.DefaultTokens)
	r.PartitionDays = defaults.Positive(r.PartitionDays, retention.DefaultPartitionDays)
	r.Ahead = defaults.Positive(r.Ahead, retention.DefaultAhead)
	m := &retention.Maintainer{Store: db, Retention: r, Logger: o.Logger, Clock: o.Clock,
		JobTokenTTL: defaults.Positive(o.JobTokenTTL, api.DefaultJobTokenTTL),
		Interval:    defaults.Positive(o.MaintenanceInterval, retention.DefaultInterval)}
	if m.Clock == nil {
		m.Clock = time.Now
	}
	return m
}

// RegisterRetentionFlags defines --run-retention and --token-retention (env
// MILLWRIGHT_RUN_RETENTION, MILLWRIGHT_TOKEN_RETENTION).
func RegisterRetentionFlags(fs *flag.FlagSet, r *store.Retention) {
	server.DurationVar(fs, &r.Runs, "run-retention", "MILLWRIGHT_RUN_RETENTION", retention.DefaultRuns,
		"how long runs and their job tokens are kept once their week's partition ended (at least the job token lifetime + 24h)")
	server.DurationVar(fs, &r.Tokens, "token-retention", "MILLWRIGHT_TOKEN_RETENTION", retention.DefaultTokens,
		"how long user tokens are kept once revoked or expired")
}

// Migrate applies the embedded migrations.
func Migrate(ctx context.Context, dsn string) (int64, error) {
	return migrate.Up(ctx, dsn, migrations.FS)
}
