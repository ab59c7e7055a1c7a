// Command policy serves the policy service (serve) or migrates its database (migrate).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/services/policy/internal/api"
	"github.com/millwright/millwright/services/policy/internal/app"
)

func main() {
	cli.Main("policy",
		cli.Command{Name: "serve", Usage: "serve the policy gRPC API", Run: serve},
		cli.Command{Name: "migrate", Usage: "apply the database migrations", Run: migrateCmd})
}

func serve(ctx context.Context, args []string) error {
	var cfg server.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs, server.Config{Name: "policy", GRPCAddr: ":50051", MetricsAddr: ":9091"})
	var billing app.BillingConfig
	app.RegisterBillingFlags(fs, &billing) // seat check wiring: internal/app/seats.go
	opts := app.Options{Flags: fs}
	app.RegisterRetentionFlags(fs, &opts.Retention)
	fs.Int64Var(&opts.CheckBytesInFlight, "check-bytes-in-flight", api.DefaultCheckBytesInFlight,
		"builder checks running at once, in bytes of documents (each weighted by its size + 64 KiB); beyond it a check queues")
	fs.DurationVar(&opts.CheckQueueWait, "check-queue-wait", 2*time.Second,
		"how long a builder check queues for room before ResourceExhausted OVERLOADED")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	seats, closeBilling, err := app.DialBilling(ctx, billing, cfg.ServiceToken.Reveal())
	if errors.Is(err, app.ErrNoBillingAddr) {
		return cli.Usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if billing.None {
		slog.Warn("running without billing (--no-billing): builder rights and member writes are not priced, no seat cap is enforced")
	}
	defer closeBilling.Close()
	if opts.CheckBytesInFlight <= 0 || opts.CheckQueueWait <= 0 {
		return cli.Usagef("--check-bytes-in-flight and --check-queue-wait must be positive")
	}
	opts.SeatChecker = seats
	return app.Run(ctx, cfg, opts)
}

func migrateCmd(ctx context.Context, args []string) error {
	var cfg server.Config
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	cfg.RegisterFlags(fs, server.Config{Name: "policy"})
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	v, err := app.Migrate(ctx, cfg.DatabaseURL.Reveal())
	if err != nil {
		return err
	}
	fmt.Printf("policy: database at version %d\n", v)
	return nil
}
