// Command gateway serves millwright's REST API by calling the three services over gRPC.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/millwright/millwright/gateway"
	"github.com/millwright/millwright/gateway/internal/gw"
	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

func main() {
	cli.Main("gateway", cli.Command{Name: "serve", Usage: "serve REST on --http-addr", Run: serve})
}

func serve(ctx context.Context, args []string) error {
	var cfg gw.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Limits.Validate(); err != nil {
		return cli.Usagef("%v", err)
	}
	logger, err := server.NewLogger(os.Stderr, cfg.LogLevel, "json")
	if err != nil {
		return cli.Usagef("%v", err)
	}
	server.LogConfig(logger, fs)
	// OTEL_EXPORTER_OTLP_ENDPOINT set: the gateway's calls are spans of the caller's trace.
	shutdownTracing, err := server.SetupTracing(ctx, "gateway")
	if err != nil {
		return err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(tctx)
	}()
	g, err := gw.New(ctx, cfg.Upstreams, gateway.OpenAPI, logger)
	if err != nil {
		return err
	}
	defer g.Close()
	logger.Info("listening", "http", cfg.HTTPAddr)
	srv := gw.Server(cfg.HTTPAddr, g, cfg.Limits)
	return gw.Serve(ctx, srv, cfg.ShutdownTimeout)
}
