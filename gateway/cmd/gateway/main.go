// Command gateway serves millwright's REST API by calling the three services over gRPC.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/millwright/millwright/gateway"
	"github.com/millwright/millwright/gateway/internal/gw"
)

func main() {
	var cfg gw.Config
	cfg.RegisterFlags(flag.CommandLine)
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg gw.Config, logger *slog.Logger) error {
	g, err := gw.New(ctx, cfg.Upstreams, gateway.OpenAPI, logger)
	if err != nil {
		return err
	}
	defer g.Close()
	logger.Info("listening", "http", cfg.HTTPAddr, "policy", cfg.Upstreams.Policy,
		"roleset", cfg.Upstreams.Roleset, "billing", cfg.Upstreams.Billing)
	srv := &http.Server{Addr: cfg.HTTPAddr, Handler: g, ReadHeaderTimeout: 10 * time.Second}
	return gw.Serve(ctx, srv, cfg.ShutdownTimeout)
}
