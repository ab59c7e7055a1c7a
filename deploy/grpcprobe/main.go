package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Exit codes: 0 healthy, 1 unhealthy or unreachable, 2 bad usage. Docker and Compose only look
// at zero versus non-zero.
const (
	exitOK        = 0
	exitUnhealthy = 1
	exitUsage     = 2
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("grpcprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "gRPC address to ask grpc.health.v1 Check (host:port)")
	service := fs.String("service", "", "service name to check (empty: the server as a whole)")
	httpURL := fs.String("http", "", "instead of gRPC, GET this URL and require HTTP 200")
	timeout := fs.Duration("timeout", 3*time.Second, "deadline for the whole check")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if (*addr == "") == (*httpURL == "") {
		fmt.Fprintln(stderr, "grpcprobe: give exactly one of -addr or -http")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	if *httpURL != "" {
		err = checkHTTP(ctx, *httpURL)
	} else {
		err = checkGRPC(ctx, *addr, *service)
	}
	if err != nil {
		fmt.Fprintln(stderr, "grpcprobe:", err)
		return exitUnhealthy
	}
	return exitOK
}

func checkGRPC(ctx context.Context, addr, service string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s: %s", addr, resp.GetStatus())
	}
	return nil
}

func checkHTTP(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}
