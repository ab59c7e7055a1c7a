package servicetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/millwright/millwright/pkg/pgtest"
)

// PolicyOptions says how to run the real policy.
type PolicyOptions struct {
	// AdminToken and ServiceToken are policy's config tokens (the superadmin's and the
	// platform's); they reach it through the environment, never the command line.
	AdminToken, ServiceToken string
	// BillingAddr is the billing service policy prices seat-adding changes with; empty runs
	// policy with --no-billing (member writes are not priced).
	BillingAddr string
	// BuildFlags are extra go build flags (e.g. "-tags=failpoints": the fault build).
	BuildFlags []string
}

// Policy is the real policy binary serving beside a test on its own migrated database.
type Policy struct {
	// Addr is its gRPC address.
	Addr string
	// DSN is its database (for a failing test to dump what policy wrote).
	DSN string

	start    func(testing.TB, ...string)
	stop     func()
	stopOnce sync.Once
	exited   chan struct{}
}

// StartPolicy builds the policy command, migrates a fresh database with its own migrate
// subcommand, serves it on a free loopback address and returns once it reports SERVING on
// grpc.health.v1. It is stopped at cleanup (or earlier with Stop). Other services' tests run
// policy as a process because its packages are internal to its module, which is also how
// production runs it.
func StartPolicy(t testing.TB, o PolicyOptions) *Policy {
	t.Helper()
	bin := Build(t, "./services/policy/cmd/policy", o.BuildFlags...)
	p := &Policy{Addr: FreeAddr(t)}
	p.DSN = pgtest.NewDatabase(t, "policy", func(ctx context.Context, dsn string) error {
		mig := exec.CommandContext(ctx, bin, "migrate")
		mig.Env = append(os.Environ(), "DATABASE_URL="+dsn)
		if out, err := mig.CombinedOutput(); err != nil {
			return fmt.Errorf("policy migrate: %w: %s", err, out)
		}
		return nil
	})
	args := []string{"serve", "--grpc-addr", p.Addr, "--metrics-addr", "", "--log-level", "error"}
	if o.BillingAddr == "" {
		args = append(args, "--no-billing")
	} else {
		args = append(args, "--billing-addr", o.BillingAddr)
	}
	p.start = func(t testing.TB, env ...string) {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, args...) // cancel: SIGKILL
		// Secrets in the environment, never on a command line (ps shows those to every user).
		cmd.Env = append(os.Environ(), "DATABASE_URL="+p.DSN,
			"MILLWRIGHT_ADMIN_TOKEN="+o.AdminToken, "MILLWRIGHT_SERVICE_TOKEN="+o.ServiceToken)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		p.stopOnce = sync.Once{}
		p.stop = func() { cancel(); <-exited }
		p.exited = exited
		WaitServing(t, p.Addr, exited, func() error { return waitErr })
	}
	p.start(t)
	t.Cleanup(p.Stop)
	return p
}

// Restart kills policy (SIGKILL) if it runs and starts it again on the same address and
// database, returning once it is SERVING: a crash and a supervisor's restart.
func (p *Policy) Restart(t testing.TB) { p.RestartWith(t) }

// RestartWith is Restart with extra environment entries for the new process (e.g.
// failpoint.Arm: a fault build armed to crash at a named failpoint).
func (p *Policy) RestartWith(t testing.TB, env ...string) {
	t.Helper()
	p.Stop()
	p.start(t, env...)
}

// Exited is closed when the current process has exited (killed by Stop, or on its own).
func (p *Policy) Exited() <-chan struct{} { return p.exited }

// Stop kills policy (SIGKILL) and waits for it to exit; calling it again does nothing.
func (p *Policy) Stop() { p.stopOnce.Do(p.stop) }

// WaitServing polls grpc.health.v1 at addr until it says SERVING (30 s at most), failing at
// once if the process (closing exited when it ends) exits first.
func WaitServing(t testing.TB, addr string, exited <-chan struct{}, exitErr func() error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		select {
		case <-exited:
			t.Fatalf("the process of %s exited before serving: %v (its log is on stderr)", addr, exitErr())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not SERVING after 30 s: %v %v", addr, resp.GetStatus(), err)
		}
	}
}
