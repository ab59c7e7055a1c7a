package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/servicetest"
)

// needsStack skips t under -short: it starts the whole stack.
func needsStack(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the whole stack; skipped with -short")
	}
}

// TestLocalStack starts scripts/run.sh the way `make run` does, checks what the README promises
// (every service lists itself, health and reflection; health is SERVING; the gateway answers
// /healthz and /openapi.json; the demo is loaded, and loading it again by hand changes
// nothing), then sends SIGTERM and checks that no process and no listening port is left
// behind; then starts it again on the same run directory, as a second `make run`, and checks
// the demo is still exactly as loaded (same tokens, no duplicates).
func TestLocalStack(t *testing.T) {
	needsStack(t)
	t.Parallel()
	st := StartStack(t)

	for name, addr := range map[string]string{"policy": st.Policy, "roleset": st.Roleset, "billing": st.Billing} {
		t.Run(name, func(t *testing.T) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus())

			services := listServices(ctx, t, conn)
			require.Contains(t, services, "grpc.health.v1.Health")
			require.Contains(t, services, "grpc.reflection.v1.ServerReflection")
			require.Contains(t, services, "millwright."+name+".v1.EventService")
		})
	}

	resp, err := http.Get(st.HTTP + "/healthz")
	require.NoError(t, err)
	var health struct {
		OK        bool              `json:"ok"`
		Upstreams map[string]string `json:"upstreams"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&health))
	resp.Body.Close()
	require.True(t, health.OK, "%v", health.Upstreams)

	resp, err = http.Get(st.HTTP + "/openapi.json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	resp.Body.Close()
	require.NotEmpty(t, doc["paths"])

	demo := checkDemo(t, st)

	// The runbook's signals are on each service's /metrics (docs/operations.md).
	for i, want := range [][]string{
		{`millwright_stream_live{stream="policy"} 1`, `millwright_cache_lookups_total{cache="builder_flags",result="hit"}`,
			`millwright_cache_lookups_total{cache="tokens",result="miss"}`, `millwright_grpc_requests_total`},
		{`millwright_stream_live{stream="roleset"} 1`, `millwright_cache_lookups_total{cache="roleset_connections",result="hit"}`,
			`millwright_roleset_sweeps_total`, `millwright_roleset_sweep_dropped_total`},
		{`millwright_stream_live{stream="billing"} 1`, `millwright_billing_projection_lag_events`},
	} {
		resp, err := http.Get("http://" + st.metrics[i] + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, w := range want {
			require.Contains(t, string(body), w, "metrics of %s", st.metrics[i])
		}
	}

	st.Stop(t)
	for _, addr := range st.Addrs() {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			t.Errorf("%s still listening after SIGTERM", addr)
		}
	}
	out, _ := exec.Command("pgrep", "-af", st.Dir).Output()
	require.Empty(t, strings.TrimSpace(string(out)), "processes left behind")

	st.Restart(t)
	require.Equal(t, demo, demoState(t, st), "a second make run changed the demo")
	st.Stop(t)
}

func listServices(ctx context.Context, t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// Stack is a running scripts/run.sh with its own ports, data directory and binaries.
type Stack struct {
	Dir                             string // the run directory: Postgres data, tokens
	Policy, Roleset, Billing, HTTPA string
	Proxy                           string // roleset's PostgreSQL proxy
	HTTP                            string // base URL of the gateway
	metrics                         []string
	pg                              string
	pgPort                          int
	root, bin, log                  string
	cmd                             *exec.Cmd
	done                            chan error
}

// AdminToken is the superadmin bootstrap token run.sh generated.
func (s *Stack) AdminToken(t testing.TB) string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "admin-token"))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// Do sends one request to the gateway and returns the HTTP status and body. A body that is
// not nil is sent as JSON (protojson with proto field names for a message, as REST clients
// write it; encoding/json otherwise); a token that is not empty is the bearer.
func (s *Stack) Do(t *testing.T, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		var b []byte
		var err error
		if m, ok := body.(proto.Message); ok {
			b, err = protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
		} else {
			b, err = json.Marshal(body)
		}
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.HTTP+path, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

// DoJSON is Do for a call answered with a JSON object (as every answer of the gateway is),
// which it decodes.
func (s *Stack) DoJSON(t *testing.T, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	code, raw := s.Do(t, method, path, token, body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s %s: %s", method, path, raw)
	return code, out
}

// Token returns the content of a token file run.sh or the demo loader wrote (e.g. "job-alice").
func (s *Stack) Token(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Dir, name))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// SuperuserURL is the stack's Postgres as its superuser, on database db.
func (s *Stack) SuperuserURL(t testing.TB, db string) string {
	return "postgres://postgres:" + s.Token(t, "pg-password") + "@" + s.pg + "/" + db + "?sslmode=disable"
}

// DemoEnv is the environment run.sh gives the demo loader, to run it again by hand.
func (s *Stack) DemoEnv(t testing.TB) []string {
	return []string{
		"MILLWRIGHT_ADMIN_TOKEN=" + s.AdminToken(t), "MILLWRIGHT_SERVICE_TOKEN=" + s.Token(t, "service-token"),
		"MILLWRIGHT_POLICY_ADDR=" + s.Policy, "MILLWRIGHT_ROLESET_ADDR=" + s.Roleset,
		"MILLWRIGHT_BILLING_ADDR=" + s.Billing, "MILLWRIGHT_HTTP_ADDR=" + s.HTTPA, "MILLWRIGHT_RUN_DIR=" + s.Dir,
		"MILLWRIGHT_DEMO_TARGET_URL=postgres://millwright_demo_admin:" + s.Token(t, "demo-admin-password") +
			"@" + s.pg + "/millwright_demo",
	}
}

// Bin is the path of one of the binaries the stack runs (policy, roleset, billing, gateway,
// demo) or of the CLI (millwright).
func (s *Stack) Bin(name string) string { return filepath.Join(s.bin, name) }

// Addrs lists every address the stack listens on.
func (s *Stack) Addrs() []string {
	return append([]string{s.Policy, s.Roleset, s.Billing, s.HTTPA, s.Proxy, s.pg}, s.metrics...)
}

// StartStack builds the binaries and starts the stack on free ports; it is stopped at cleanup
// if the test has not stopped it. It returns once the gateway is healthy and the demo loaded.
func StartStack(t testing.TB) *Stack {
	t.Helper()
	root := repoRoot(t)
	dir, err := os.MkdirTemp("", "millwright-e2e-")
	require.NoError(t, err)
	// The Postgres server runs as the postgres user when we are root: it must reach the dir.
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+"/",
		"./services/policy/cmd/policy", "./services/roleset/cmd/roleset",
		"./services/billing/cmd/billing", "./gateway/cmd/gateway", "./gateway/cmd/demo", "./cli/cmd/millwright")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	ports, metrics := freePorts(t, 6), servicetest.FreeRun(t, 3)
	host := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	st := &Stack{
		Dir: filepath.Join(dir, "run"), Policy: host(ports[0]), Roleset: host(ports[1]),
		Billing: host(ports[2]), HTTPA: host(ports[3]), Proxy: host(ports[5]), pg: host(ports[4]), pgPort: ports[4],
		metrics: []string{host(metrics), host(metrics + 1), host(metrics + 2)},
		root:    root, bin: bin, log: filepath.Join(dir, "stack.log"),
	}
	st.HTTP = "http://" + st.HTTPA
	t.Cleanup(func() {
		if st.cmd != nil {
			// SIGTERM first, so that run.sh stops Postgres too (a SIGKILL would orphan it:
			// pg_ctl daemonizes the server); SIGKILL only if it does not stop in time.
			_ = st.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-st.done:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-st.cmd.Process.Pid, syscall.SIGKILL)
				<-st.done
			}
			st.cmd = nil
		}
		// Whatever happened above, no server may outlive the test.
		stop := exec.Command("bash", filepath.Join(root, "scripts", "localpg.sh"), "stop")
		stop.Env = append(os.Environ(), "MILLWRIGHT_RUN_DIR="+st.Dir)
		if out, err := stop.CombinedOutput(); err != nil {
			t.Logf("localpg.sh stop: %v: %s", err, out)
		}
		if t.Failed() {
			b, _ := os.ReadFile(st.log)
			t.Logf("stack log:\n%s", tail(string(b), 6000))
		}
	})
	st.start(t)
	return st
}

// Restart starts run.sh again on the same run directory and ports, as a second `make run`
// does: Postgres data, databases, tokens and the demo are reused.
func (s *Stack) Restart(t testing.TB) {
	t.Helper()
	require.Nil(t, s.cmd, "Restart needs a stopped stack")
	s.start(t)
}

func (s *Stack) start(t testing.TB) {
	t.Helper()
	s.done = make(chan error, 1)
	cmd := exec.Command("bash", filepath.Join(s.root, "scripts", "run.sh"))
	cmd.Dir = s.root
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "MILLWRIGHT_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"MILLWRIGHT_RUN_DIR="+s.Dir, "MILLWRIGHT_BIN_DIR="+s.bin,
		"MILLWRIGHT_PG_PORT="+strconv.Itoa(s.pgPort),
		"MILLWRIGHT_POLICY_ADDR="+s.Policy, "MILLWRIGHT_ROLESET_ADDR="+s.Roleset,
		"MILLWRIGHT_BILLING_ADDR="+s.Billing, "MILLWRIGHT_HTTP_ADDR="+s.HTTPA, "MILLWRIGHT_PROXY_ADDR="+s.Proxy,
		"MILLWRIGHT_METRICS_BASE_PORT="+strings.TrimPrefix(s.metrics[0], "127.0.0.1:"))
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	_ = os.Remove(filepath.Join(s.Dir, "demo-loaded"))
	require.NoError(t, cmd.Start())
	s.cmd = cmd
	done := s.done
	go func() { done <- cmd.Wait(); logf.Close() }()

	// Ready = the gateway answers /healthz and run.sh has loaded the demo (it marks that with
	// demo-loaded in the run directory, removed when it starts).
	loaded := filepath.Join(s.Dir, "demo-loaded")
	deadline := time.Now().Add(120 * time.Second)
	for {
		resp, err := http.Get(s.HTTP + "/healthz")
		if err == nil {
			resp.Body.Close()
			if _, serr := os.Stat(loaded); resp.StatusCode == http.StatusOK && serr == nil {
				return
			}
		}
		select {
		case err := <-s.done:
			s.cmd = nil
			b, _ := os.ReadFile(s.log)
			t.Fatalf("stack exited early (%v):\n%s", err, tail(string(b), 6000))
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("stack not healthy with the demo loaded within 120s")
		}
	}
}

// Stop sends SIGTERM to run.sh, as a user's Ctrl-C or a supervisor would, and waits for it.
func (s *Stack) Stop(t testing.TB) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("run.sh did not stop within 30s of SIGTERM")
	}
	s.cmd = nil
}

func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "go.work"))
	require.NoError(t, err, "repository root not found from %s", dir)
	return dir
}

// freePorts returns n ports that were free a moment ago (servicetest.FreePort).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = servicetest.FreeRun(t, 1)
	}
	return ports
}

// tail is the end of a stack log for a failure message, without the gateway's /healthz
// lines, which the readiness poll writes four times a second and which would push out the
// lines that say what went wrong.
func tail(s string, n int) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.Contains(line, `"path":"/healthz"`) {
			keep = append(keep, line)
		}
	}
	s = strings.Join(keep, "\n")
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
