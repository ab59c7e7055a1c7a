package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/millwright/millwright/pkg/apidesc"
	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/validate"
)

// streamGrace is how long open streams keep running after health turns NOT_SERVING.
const streamGrace = 200 * time.Millisecond

// Options are what a service plugs into Run.
type Options struct {
	// Pool, when set, must answer a ping for the service to be SERVING.
	Pool *pgxpool.Pool
	// SchemaVersion, when set, must report current == expected for the service to be
	// SERVING (typically migrate's applied version against the embedded one).
	SchemaVersion func(ctx context.Context) (current, expected int64, err error)
	// Authenticator decides every call that is not public. Required.
	Authenticator auth.Authenticator
	// Public lists full method names ("/pkg.Service/Method") that need no token. Health and
	// reflection are always public.
	Public []string
	// Validator validates every request message. Required: a method without a validator
	// is refused, so a service without a registry could serve nothing.
	Validator *validate.Registry
	// Register registers the service implementations on the server.
	Register func(s *grpc.Server)
	// Background are long-running loops (stream listener, sweeps). They get a context that
	// ends after the gRPC server has stopped; an error from one stops the server and is
	// returned by Run.
	Background []func(ctx context.Context) error
	// Logger; nil builds one from Config.LogLevel and LogFormat on stderr.
	Logger *slog.Logger
	// Registry receives the server's metrics and is served on /metrics; nil uses
	// NewRegistry(). Pass your own to add service metrics.
	Registry *prometheus.Registry
	// OnListen, when set, is called once both listeners are bound, with their actual
	// addresses (metricsAddr is "" when metrics are off). Tests use it with port 0.
	OnListen func(grpcAddr, metricsAddr string)
	// HealthInterval is how often readiness is re-checked once SERVING (default 5s).
	HealthInterval time.Duration
	// Audit, when set, records every RPC's decision (the step after authentication) by
	// AuditRules, and serves AuditService for its trail (docs/audit.md).
	Audit      *audit.Recorder
	AuditRules audit.Rules
	// Flags, when set, are logged at start with their sources and secrets redacted
	// (LogConfig), so an operator sees what a replica actually runs with. Unset, the flags
	// ServeArgs parsed are.
	Flags *flag.FlagSet
}

// LivenessService is the grpc.health.v1 service name a liveness probe asks: SERVING while the
// process serves gRPC, independent of the database and the schema ("" and the API services
// are NOT_SERVING then, which is right for readiness but would make a liveness probe restart
// every pod during a database outage or a pending migration, curing neither).
const LivenessService = "liveness"

// MaxRecvMsgSize is the largest request message a service accepts (gRPC's default is 4 MiB).
// It is above every limit a service applies itself (a builder document is capped at 3 MiB), so
// that a document over such a limit reaches the handler and is answered InvalidArgument naming
// the field, rather than ResourceExhausted by the transport.
const MaxRecvMsgSize = 16 << 20

// MaxSendMsgSize is the largest answer a service sends (gRPC's default is unbounded): an
// answer past it fails ResourceExhausted rather than being built and sent whole.
const MaxSendMsgSize = 16 << 20

// MaxHeaderListSize bounds a call's metadata (gRPC's default is 16 MiB): a bearer token and a
// request id need far less.
const MaxHeaderListSize = 64 << 10

// transportOptions bound what one client connection can hold: message and metadata sizes,
// the handshake time, calls in flight, idle time, and dead peers (pinged after a minute of
// silence, dropped 20 s later).
func transportOptions(l Limits) []grpc.ServerOption {
	l = l.withDefaults()
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxSendMsgSize(MaxSendMsgSize),
		grpc.MaxHeaderListSize(MaxHeaderListSize),
		grpc.ConnectionTimeout(l.ConnectionTimeout),
		grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.IdleTimeout, Time: time.Minute, Timeout: 20 * time.Second}),
		// Accept the pings Dial's clients send; the default policy (5 min) would answer
		// them with GOAWAY "too many pings".
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// Run serves until ctx is cancelled (SIGTERM via cli.Main) or a listener or background loop
// fails. Shutdown: health NOT_SERVING, open streams ended, GracefulStop bounded by
// cfg.ShutdownTimeout then Stop, metrics server stopped, background loops waited for. It
// returns nil after a shutdown asked for through ctx.
//
// Each step is one function below: the logger, the gRPC server with its interceptor chain
// and health, the listeners, the supervisor of the goroutines, and the stop sequence.
func Run(ctx context.Context, cfg Config, opts Options) (err error) {
	if opts.Authenticator == nil || opts.Validator == nil || opts.Register == nil {
		return errors.New("server: Options.Authenticator, Validator and Register are required")
	}
	logger, err := runLogger(ctx, cfg, opts)
	if err != nil {
		return err
	}
	reg := opts.Registry
	if reg == nil {
		reg = NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return fmt.Errorf("server: metrics: %w", err)
	}
	if opts.Audit != nil {
		for _, c := range opts.Audit.Collectors() {
			if _, err := register(reg, c); err != nil {
				return fmt.Errorf("server: audit metrics: %w", err)
			}
		}
	}
	tp, shutdownTracing, err := newTracerProvider(ctx, cfg.Name)
	if err != nil {
		return fmt.Errorf("server: tracing: %w", err)
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if terr := shutdownTracing(tctx); terr != nil {
			logger.Warn("tracing shutdown", "error", terr.Error())
		}
	}()

	// draining ends every open stream once shutdown has begun (see stop).
	draining, drain := context.WithCancel(context.WithoutCancel(ctx))
	defer drain()
	gs, rd, err := newGRPCServer(cfg, opts, logger, m, tp, draining)
	if err != nil {
		return err
	}
	ls, err := listen(ctx, cfg, reg, rd)
	if err != nil {
		return err
	}
	logger.Info("listening", "addr", ls.grpcAddr(), "metrics_addr", ls.metricsAddr())
	if opts.OnListen != nil {
		opts.OnListen(ls.grpcAddr(), ls.metricsAddr())
	}

	sv := newSupervisor(ctx, logger)
	defer sv.stopRun()
	sv.serve(gs, ls, rd)
	bg := opts.Background
	if opts.Audit != nil && cfg.Audit.Retention > 0 {
		bg = append(bg[:len(bg):len(bg)], auditRetention(opts.Audit, cfg.Audit.Retention, logger))
	}
	sv.background(bg)
	<-sv.run.Done()
	stop(ctx, cfg, logger, gs, ls.http, rd, drain)
	sv.wait()
	if opts.Audit != nil {
		opts.Audit.Close() // the repeats still counted
	}
	logger.Info("stopped")
	return sv.failure
}

// runLogger is opts.Logger, or one built from cfg (which then also becomes slog's default,
// so that components built without a logger, stream followers and clients, log in the same
// format instead of the log package's text), tagged with the service's name; it logs the
// configuration the process runs with.
func runLogger(ctx context.Context, cfg Config, opts Options) (*slog.Logger, error) {
	logger := opts.Logger
	if logger == nil {
		var err error
		if logger, err = NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat); err != nil {
			return nil, err
		}
		slog.SetDefault(logger)
	}
	if cfg.Name != "" {
		logger = logger.With("service", cfg.Name)
	}
	flags := opts.Flags
	if flags == nil {
		flags, _ = ctx.Value(flagsKey{}).(*flag.FlagSet)
	}
	if flags != nil {
		LogConfig(logger, flags)
	}
	return logger, nil
}

// newGRPCServer builds the gRPC server: tracing, the interceptor chain, transport limits,
// health (liveness SERVING, readiness NOT_SERVING until the first check passes), reflection
// and the service's own registrations.
func newGRPCServer(cfg Config, opts Options, logger *slog.Logger, m *metrics, tp trace.TracerProvider, draining context.Context) (*grpc.Server, *readiness, error) {
	public := map[string]bool{}
	for _, p := range opts.Public {
		public[p] = true
	}
	ch := &chain{logger: logger, metrics: m, authn: opts.Authenticator, public: public,
		validator: opts.Validator, draining: draining}
	if opts.Audit != nil {
		ch.audit = &audit.Interceptor{Recorder: opts.Audit, Rules: opts.AuditRules}
		audit.Validators(opts.Validator)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(propagator),
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())))),
		grpc.ChainUnaryInterceptor(ch.unary()...),
		grpc.ChainStreamInterceptor(ch.stream()...),
	}, transportOptions(cfg.Limits)...)...)
	hs := health.NewServer()
	// LivenessService is SERVING from now until shutdown, whatever the database: the liveness
	// probe asks it (gRPC-native), the readiness probe asks the server as a whole.
	hs.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	if err := registerReflection(gs); err != nil {
		return nil, nil, err
	}
	opts.Register(gs)
	if opts.Audit != nil {
		audit.NewService(opts.Audit).Register(gs)
	}

	names := apiServices(gs)
	var sds []grpc.ServiceDesc
	for _, n := range names {
		sds = append(sds, grpc.ServiceDesc{ServiceName: n})
	}
	if missing := opts.Validator.Missing(sds...); len(missing) > 0 {
		// Not fatal (a service may be registered ahead of its validators in development), but
		// loud: those calls are refused with Internal until a validator exists.
		logger.Error("request types without a validator; their calls will be refused", "types", missing)
	}
	interval := opts.HealthInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	rd := &readiness{hs: hs, names: append([]string{""}, names...), pool: opts.Pool, schema: opts.SchemaVersion,
		interval: interval, logger: logger}
	rd.set(false)
	return gs, rd, nil
}

// apiServices are the services registered on gs other than health and reflection: the ones
// whose health follows readiness.
func apiServices(gs *grpc.Server) []string {
	var names []string
	for name := range gs.GetServiceInfo() {
		if name != healthpb.Health_ServiceDesc.ServiceName && !infra("/"+name+"/") {
			names = append(names, name)
		}
	}
	return names
}

// listeners are the bound gRPC listener and, unless metrics are off, the metrics one with its
// HTTP server.
type listeners struct {
	grpc    net.Listener
	metrics net.Listener // nil when metrics are off
	http    *http.Server // nil when metrics are off
}

func (l *listeners) grpcAddr() string { return l.grpc.Addr().String() }

func (l *listeners) metricsAddr() string {
	if l.metrics == nil {
		return ""
	}
	return l.metrics.Addr().String()
}

// listen binds cfg.GRPCAddr and cfg.MetricsAddr ("" for none); on an error nothing stays bound.
func listen(ctx context.Context, cfg Config, reg *prometheus.Registry, rd *readiness) (*listeners, error) {
	var lc net.ListenConfig
	glis, err := lc.Listen(ctx, "tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("server: listen %s: %w", cfg.GRPCAddr, err)
	}
	ls := &listeners{grpc: glis}
	if cfg.MetricsAddr == "" {
		return ls, nil
	}
	if ls.metrics, err = lc.Listen(ctx, "tcp", cfg.MetricsAddr); err != nil {
		glis.Close()
		return nil, fmt.Errorf("server: listen %s: %w", cfg.MetricsAddr, err)
	}
	// Scrapes and probes are small GETs: bound every phase, like the gateway does.
	ls.http = &http.Server{Handler: httpMux(reg, rd), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute,
		MaxHeaderBytes: 64 << 10}
	return ls, nil
}

// supervisor runs the servers and the background loops. run ends when ctx does or at the
// first failure, which it records; the background loops get their own context, which ends
// only after the gRPC server has stopped (in-flight calls may depend on them: the stream
// listener feeds caches).
type supervisor struct {
	logger         *slog.Logger
	run            context.Context
	stopRun        context.CancelFunc
	bg             context.Context
	stopBg         context.CancelFunc
	servers, loops sync.WaitGroup
	failOnce       sync.Once
	failure        error
}

func newSupervisor(ctx context.Context, logger *slog.Logger) *supervisor {
	sv := &supervisor{logger: logger}
	sv.run, sv.stopRun = context.WithCancel(ctx)
	sv.bg, sv.stopBg = context.WithCancel(context.WithoutCancel(ctx))
	return sv
}

// fail records the first failure and ends run.
func (sv *supervisor) fail(err error) {
	sv.failOnce.Do(func() { sv.failure = err })
	sv.stopRun()
}

// serve starts the gRPC server, the metrics server and the readiness loop.
func (sv *supervisor) serve(gs *grpc.Server, ls *listeners, rd *readiness) {
	sv.servers.Go(func() {
		if err := gs.Serve(ls.grpc); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			sv.fail(fmt.Errorf("server: grpc: %w", err))
		}
	})
	if ls.http != nil {
		sv.servers.Go(func() {
			if err := ls.http.Serve(ls.metrics); err != nil && !errors.Is(err, http.ErrServerClosed) {
				sv.fail(fmt.Errorf("server: metrics: %w", err))
			}
		})
	}
	sv.servers.Go(func() { rd.run(sv.run) })
}

// background starts the loops; an error from one, or one ending early, is a failure.
func (sv *supervisor) background(loops []func(context.Context) error) {
	for i, fn := range loops {
		sv.loops.Go(func() {
			err := fn(sv.bg)
			switch {
			case err != nil && sv.bg.Err() == nil:
				sv.fail(fmt.Errorf("server: background loop %d: %w", i, err))
			case err == nil && sv.bg.Err() == nil:
				sv.logger.Warn("background loop ended early", "index", i)
			}
		})
	}
}

// wait stops the background loops and waits for them and the servers.
func (sv *supervisor) wait() {
	sv.stopBg()
	sv.loops.Wait()
	sv.servers.Wait()
}

// stop shuts the servers down: NOT_SERVING everywhere (for good), then GracefulStop with
// open streams ended after a short grace, bounded by cfg.ShutdownTimeout, then Stop; then
// the metrics server.
func stop(ctx context.Context, cfg Config, logger *slog.Logger, gs *grpc.Server, hsrv *http.Server, rd *readiness, drain context.CancelFunc) {
	timeout := cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	logger.Info("shutting down", "timeout", timeout.String())
	rd.shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	deadline := time.After(timeout)
	// Give health watchers (client-side load balancers) a moment to receive NOT_SERVING
	// before their streams are ended, then end every open stream so GracefulStop only waits
	// for unary calls.
	select {
	case <-stopped:
	case <-time.After(min(streamGrace, timeout/2)):
	}
	drain()
	select {
	case <-stopped:
	case <-deadline:
		logger.Warn("graceful stop timed out; closing remaining calls")
		gs.Stop()
		// Stop cancels the calls' contexts but cannot end a handler that ignores its context,
		// and GracefulStop waits for handlers: give them a moment, then return anyway rather
		// than hang the process's exit on a stuck handler.
		select {
		case <-stopped:
		case <-time.After(time.Second):
			logger.Error("handlers still running after stop; exiting without them")
		}
	}
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = hsrv.Shutdown(sctx)
		cancel()
	}
}

// httpMux serves /metrics, /healthz (readiness: 200 only while SERVING, same as grpc health
// "") and /livez (200 while the process runs, for a liveness probe that must not restart a
// pod merely because the database is away).
func httpMux(reg *prometheus.Registry, rd *readiness) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !rd.ready.Load() {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

// registerReflection serves reflection (v1 and the v1alpha older grpcurl builds ask for) from
// the documented descriptors, so `grpcurl describe` shows every comment of the contracts.
func registerReflection(gs *grpc.Server) error {
	res, err := apidesc.Resolver()
	if err != nil {
		return err
	}
	opts := reflection.ServerOptions{Services: gs, DescriptorResolver: res}
	reflectionv1.RegisterServerReflectionServer(gs, reflection.NewServerV1(opts))
	reflectionv1alpha.RegisterServerReflectionServer(gs, reflection.NewServer(opts))
	return nil
}
