// Command policy serves the policy service (serve) or migrates its database (migrate).
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/services/policy/internal/app"
	"github.com/millwright/millwright/services/policy/internal/store"
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
	var billingAddr string
	app.RegisterBillingFlag(fs, &billingAddr) // seat check wiring: internal/app/seats.go
	var keep store.Retention
	app.RegisterRetentionFlags(fs, &keep)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	seats, closeBilling, err := app.DialBilling(ctx, billingAddr, cfg.ServiceToken.Reveal())
	if err != nil {
		return err
	}
	defer closeBilling.Close()
	return app.Run(ctx, cfg, app.Options{SeatChecker: seats, Retention: keep, Flags: fs})
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
