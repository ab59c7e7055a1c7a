package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/api"
	"github.com/millwright/millwright/services/policy/internal/authn"
	"github.com/millwright/millwright/services/policy/internal/settings"
	"github.com/millwright/millwright/services/policy/internal/store"
	"github.com/millwright/millwright/services/policy/migrations"
)

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
	// CheckBytesInFlight and CheckQueueWait bound the builder checks running at once (see
	// api.Deps; defaults 64 MiB of documents, 2 s of queueing before ResourceExhausted).
	CheckBytesInFlight int64
	CheckQueueWait     time.Duration
	// Stream tunes the listener.
	Stream stream.Options
	// Flags are logged at start (pkg/server.Options.Flags).
	Flags *flag.FlagSet
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
}

// defaultMaxConns is the pool size when DATABASE_URL sets none: enough to keep commits of the
// job path in flight together (PostgreSQL groups their WAL flushes), small enough that three
// replicas and the other services fit in max_connections = 100.
const defaultMaxConns = 24

// Run serves the policy service until ctx ends.
func Run(ctx context.Context, cfg server.Config, o Options) error {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL.Reveal())
	if err != nil {
		return fmt.Errorf("policy: database: %w", err)
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
		return fmt.Errorf("policy: database: %w", err)
	}
	defer pool.Close()

	st := stream.New(pool, o.Stream)
	db := store.New(pool)
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
	defer unsub()
	if o.OnReady != nil {
		o.OnReady(&Parts{Store: db, Stream: st, Settings: set, Authn: local})
	}

	expected, err := migrate.Expected(migrations.FS)
	if err != nil {
		return err
	}
	reg := server.NewRegistry()
	reg.MustRegister(st.Collectors("policy")...)
	reg.MustRegister(server.CacheCollectors("builder_flags", set.CacheStats)...)
	reg.MustRegister(server.CacheCollectors("tokens", local.CacheStats)...)
	return server.Run(ctx, cfg, server.Options{
		Flags:    o.Flags,
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
			auth.Static{AdminToken: cfg.AdminToken.Reveal(), ServiceToken: cfg.ServiceToken.Reveal()},
			local,
		},
		Validator: api.Validators(),
		Register: func(gs *grpc.Server) {
			api.Register(gs, api.Deps{Store: db, Settings: set, Stream: st, JobTokenTTL: o.JobTokenTTL,
				CheckBytesInFlight: o.CheckBytesInFlight, CheckQueueWait: o.CheckQueueWait})
		},
		Background: []func(context.Context) error{st.Run},
		OnListen:   o.OnListen,
		Logger:     o.Logger,
	})
}

// Migrate applies the embedded migrations.
func Migrate(ctx context.Context, dsn string) (int64, error) {
	return migrate.Up(ctx, dsn, migrations.FS)
}
