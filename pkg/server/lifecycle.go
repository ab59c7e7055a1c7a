package server

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"

	"github.com/millwright/millwright/pkg/cli"
)

// Every service binary goes through the same three steps, so that one reads like another:
//
//  1. configuration: RegisterFlags fills the service's Config from flags and environment
//     (a Config embeds this package's Config, and adds its own fields);
//  2. completion: Complete validates the Config (a mistake is a cli.UsageError, exit code 2)
//     and acquires what the service depends on, the database pool and the connections to the
//     services it calls, pushing the release of each onto Closers as it goes;
//  3. run: the Runner that Complete returned serves until ctx ends (Run, underneath).
//
// Serve then releases the Closers in reverse order of acquisition, whether Complete failed
// half-way or the Runner returned.

// Completer is a service's configuration, read and ready to be completed.
type Completer interface {
	// Complete validates the configuration and acquires the service's dependencies; each is
	// released by a function pushed onto c.
	Complete(ctx context.Context, c *Closers) (Runner, error)
}

// Service is a Completer that defines its own flags (step 1).
type Service interface {
	Completer
	RegisterFlags(fs *flag.FlagSet)
}

// Runner serves until ctx ends.
type Runner func(ctx context.Context) error

// CompleteFunc makes a function a Completer.
type CompleteFunc func(ctx context.Context, c *Closers) (Runner, error)

// Complete calls f.
func (f CompleteFunc) Complete(ctx context.Context, c *Closers) (Runner, error) { return f(ctx, c) }

// Serve completes s, runs it until ctx ends, and releases what it acquired, in reverse order.
func Serve(ctx context.Context, s Completer) error {
	var c Closers
	defer c.Close()
	run, err := s.Complete(ctx, &c)
	if err != nil {
		return err
	}
	return run(ctx)
}

// Closers is a stack of release functions (a pool's Close, a connection's Close, an
// unsubscribe). Close runs them last pushed first, so that nothing is released while
// something acquired after it, which may use it, still runs.
type Closers struct {
	mu  sync.Mutex
	fns []func()
}

// Push adds a release function.
func (c *Closers) Push(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

// Close runs the release functions in reverse order of Push, once each.
func (c *Closers) Close() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// Commands are a service binary's subcommands, the same for every service: serve (the
// lifecycle above, on the Service newService returns), migrate (the service's embedded
// migrations, through migrate) and audit (verify or export the service's audit trail).
func Commands(name, serveUsage string, newService func() Service, migrate func(ctx context.Context, dsn string) (int64, error)) []cli.Command {
	return []cli.Command{
		{Name: "serve", Usage: serveUsage, Run: func(ctx context.Context, args []string) error {
			return ServeArgs(ctx, newService(), args)
		}},
		{Name: "migrate", Usage: "apply the database migrations", Run: func(ctx context.Context, args []string) error {
			return migrateCommand(ctx, name, args, migrate)
		}},
		{Name: "audit", Usage: "verify the audit trail's hash chain, or export it as JSON lines (docs/audit.md)", Run: func(ctx context.Context, args []string) error {
			return AuditCommand(ctx, name, args, os.Stdout)
		}},
	}
}

// ServeArgs is the serve subcommand: s's flags parsed from args (and the environment), then
// Serve.
func ServeArgs(ctx context.Context, s Service, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	s.RegisterFlags(fs)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	// Run logs them (Options.Flags); they travel in ctx so that no Config has to carry them.
	return Serve(context.WithValue(ctx, flagsKey{}, fs), s)
}

// flagsKey is the context key of the flags ServeArgs parsed.
type flagsKey struct{}

// migrateCommand applies the migrations to --database-url (env DATABASE_URL). It takes the
// common flags, like serve, so that one environment (or one set of flags) serves both.
func migrateCommand(ctx context.Context, name string, args []string, migrate func(ctx context.Context, dsn string) (int64, error)) error {
	var cfg Config
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	cfg.RegisterFlags(fs, Config{Name: name})
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return cli.Usagef("--database-url is required")
	}
	v, err := migrate(ctx, cfg.DatabaseURL.Reveal())
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s: database at version %d\n", name, v)
	return nil
}
