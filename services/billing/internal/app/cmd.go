package app

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

// Commands are billing's subcommands: serve and migrate.
func Commands() []cli.Command {
	return []cli.Command{
		{Name: "serve", Usage: "serve the billing gRPC API and follow policy's stream", Run: func(ctx context.Context, args []string) error {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var cfg Config
			cfg.RegisterFlags(fs)
			if err := cli.ParseFlags(fs, args); err != nil {
				return err
			}
			return Serve(ctx, cfg, Hooks{Flags: fs})
		}},
		{Name: "migrate", Usage: "apply billing's database migrations", Run: func(ctx context.Context, args []string) error {
			fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
			var dsn server.DSN
			server.DSNVar(fs, &dsn, "database-url", "DATABASE_URL", "", "PostgreSQL connection string")
			if err := cli.ParseFlags(fs, args); err != nil {
				return err
			}
			if dsn == "" {
				return cli.Usagef("--database-url is required")
			}
			v, err := Migrate(ctx, dsn.Reveal())
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "billing: schema at version %d\n", v)
			return nil
		}},
	}
}
