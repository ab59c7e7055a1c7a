package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/cli"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/policyclient"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/pkg/validate"
	"github.com/millwright/millwright/services/billing/internal/api"
	"github.com/millwright/millwright/services/billing/internal/projection"
	"github.com/millwright/millwright/services/billing/internal/seats"
	"github.com/millwright/millwright/services/billing/internal/store"
	"github.com/millwright/millwright/services/billing/migrations"
)

// Config is billing's configuration: the common server flags plus its own.
type Config struct {
	server.Config
	// PolicyAddr is policy's gRPC address (its stream and snapshot).
	PolicyAddr string
	// AuthorWeight and OperatorWeight are decimal seats per user of each class.
	AuthorWeight, OperatorWeight string
	// FreshnessBound is how long a seat check waits for the projection to reach the
	// caller's stream position before answering Unavailable (PROJECTION_BEHIND).
	FreshnessBound time.Duration
	// Hooks are set by tests, never by flags.
	Hooks Hooks
}

// Commands are billing's subcommands: serve and migrate (pkg/server's lifecycle).
func Commands() []cli.Command {
	return server.Commands("billing", "serve the billing gRPC API and follow policy's stream",
		func() server.Service { return new(Config) }, Migrate)
}

// RegisterFlags defines billing's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, server.Config{Name: "billing", GRPCAddr: ":50053", MetricsAddr: ":9093"})
	server.StringVar(fs, &c.PolicyAddr, "policy-addr", "MILLWRIGHT_POLICY_ADDR", "127.0.0.1:50051", "policy's gRPC address (stream and snapshot)")
	server.StringVar(fs, &c.AuthorWeight, "author-seat-weight", "MILLWRIGHT_AUTHOR_SEAT_WEIGHT", "1", "seats one author consumes (decimal, at most 3 places)")
	server.StringVar(fs, &c.OperatorWeight, "operator-seat-weight", "MILLWRIGHT_OPERATOR_SEAT_WEIGHT", "0.5", "seats one operator-only user consumes (decimal, at most 3 places)")
	server.DurationVar(fs, &c.FreshnessBound, "freshness-bound", "MILLWRIGHT_FRESHNESS_BOUND", 2*time.Second, "how long a seat check waits for the projection to reach the caller's stream position")
}

// Weights parses the configured weights.
func (c *Config) Weights() (seats.Weights, error) {
	a, err := seats.ParseSeats(c.AuthorWeight)
	if err != nil {
		return seats.Weights{}, fmt.Errorf("author-seat-weight: %w", err)
	}
	o, err := seats.ParseSeats(c.OperatorWeight)
	if err != nil {
		return seats.Weights{}, fmt.Errorf("operator-seat-weight: %w", err)
	}
	w := seats.Weights{AuthorMilli: a, OperatorMilli: o}
	return w, w.Validate()
}

// Hooks let tests observe a running server.
type Hooks struct {
	OnListen func(grpcAddr, metricsAddr string)
	// DialPolicy replaces server.Dial for policy (tests pointing at a stand-in).
	DialPolicy func(ctx context.Context) (grpc.ClientConnInterface, error)
}

// Serve runs billing with hooks until ctx ends (tests).
func Serve(ctx context.Context, cfg Config, hooks Hooks) error {
	cfg.Hooks = hooks
	return server.Serve(ctx, &cfg)
}

// Complete validates the configuration, opens the database pool and dials policy, then builds
// the service.
func (cfg *Config) Complete(ctx context.Context, cl *server.Closers) (server.Runner, error) {
	w, err := cfg.Weights()
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	if cfg.DatabaseURL == "" {
		return nil, cli.Usagef("--database-url is required")
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL.Reveal())
	if err != nil {
		return nil, cli.Usagef("--database-url: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("billing: open database: %w", err)
	}
	cl.Push(pool.Close)

	var policy grpc.ClientConnInterface
	if cfg.Hooks.DialPolicy != nil {
		policy, err = cfg.Hooks.DialPolicy(ctx)
	} else {
		var cc *grpc.ClientConn
		cc, err = server.Dial(ctx, cfg.PolicyAddr, cfg.ServiceToken.Reveal())
		if cc != nil {
			cl.Push(func() { _ = cc.Close() })
		}
		policy = cc
	}
	if err != nil {
		return nil, fmt.Errorf("billing: dial policy: %w", err)
	}

	logger, err := server.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	logger = logger.With("service", "billing")
	st := store.New(pool, w)
	consumer := projection.New(projection.NewGRPCSource(policy), st, projection.Options{Logger: logger})
	own := stream.New(pool, stream.Options{Logger: logger})
	// Bearer tokens: tokens.After (every billing RPC refuses user and job tokens: api.Allow).
	tokens := policyclient.New(policy, policyclient.Options{Logger: logger})
	schema, err := migrate.SchemaCheck(pool, migrations.FS)
	if err != nil {
		return nil, err
	}

	rec, err := cfg.Audit.NewRecorder("billing", pool, logger)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	reg := server.NewRegistry()
	reg.MustRegister(own.Collectors("billing")...)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "millwright_billing_projection_lag_events",
		Help: "Events of policy's stream seen at its head but not yet applied to billing's projection."},
		func() float64 { head, applied := consumer.Lag(); return float64(max(head-applied, 0)) }))
	reg.MustRegister(tokens.Collectors("billing")...)
	return func(ctx context.Context) error {
		return server.Run(ctx, cfg.Config, server.Options{
			Registry:      reg,
			Pool:          pool,
			SchemaVersion: schema,
			Authenticator: tokens.After(cfg.StaticTokens()),
			Validator:     Validators(),
			Register:      Register(api.New(st, consumer, cfg.FreshnessBound), own),
			Audit:         rec,
			AuditRules:    api.AuditRules(),
			Background:    []func(context.Context) error{own.Run, consumer.Run, tokens.Run},
			OnListen:      cfg.Hooks.OnListen,
			Logger:        logger,
		})
	}, nil
}

// Register returns the registration of every service billing serves (its tests walk them:
// audit rules, validators).
func Register(billing *api.Server, own *stream.Stream) func(*grpc.Server) {
	return func(s *grpc.Server) {
		billingv1.RegisterBillingServiceServer(s, billing)
		billingv1.RegisterEventServiceServer(s, &events{stream: own})
	}
}

// Validators is the one validator of every request billing serves.
func Validators() *validate.Registry {
	reg := validate.NewRegistry()
	api.Validators(reg)
	validate.Add(reg, func(m *billingv1.WatchRequest) error {
		return validate.First(validate.MaxItems("kinds", m.GetKinds(), 20),
			validate.Each("kinds", m.GetKinds(), func(f, k string) error { return validate.MaxLen(f, k, 50) }))
	})
	return reg
}

// events serves billing's own stream (seat cap changes).
type events struct {
	billingv1.UnimplementedEventServiceServer
	stream *stream.Stream
}

func (e *events) Watch(req *billingv1.WatchRequest, srv grpc.ServerStreamingServer[billingv1.WatchResponse]) error {
	// The same readers as the usage RPCs: without this check any authenticated caller, user
	// and job tokens included, could follow the cap changes.
	return stream.ServeWatch(e.stream, req, srv, func(ctx context.Context) error { return api.Allow(ctx, api.Readers...) })
}

// Migrate applies billing's migrations.
func Migrate(ctx context.Context, dsn string) (int64, error) {
	return migrate.Up(ctx, dsn, migrations.FS)
}
