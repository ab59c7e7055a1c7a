package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/millwright/millwright/gateway"
	"github.com/millwright/millwright/gateway/internal/gw"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// BenchmarkGatewayResolveWarm measures what the REST gateway adds to a call: the same warm
// ResolveConnection (job-alice's token, datatable://main?as=viewer, a cached decision) over
// gRPC straight to roleset and over REST through the stack's gateway process, interleaved in
// one loop, taking turns in first place, so both see the same machine load. It reports both p50s and p90s and the ratio of
// the p50s (goal <= 2: two hops cannot cost less than about 2x one).
//
// Two optional extra REST targets join the same loop:
//   - MILLWRIGHT_BENCH_BASELINE_GATEWAY=<path of a gateway binary> (e.g. one built from main)
//     runs beside the stack's against the same services, reported as base*: a before/after
//     comparison that the machine's load cannot skew;
//   - MILLWRIGHT_BENCH_GATEWAY=inproc adds a gateway built in this process, reported as
//     inproc*, so that -cpuprofile and -memprofile see the gateway's work.
func BenchmarkGatewayResolveWarm(b *testing.B) {
	st := StartStack(b)
	token := st.Token(b, "job-alice")
	const reference = "datatable://main?as=viewer"

	conn, err := grpc.NewClient(st.Roleset, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	defer conn.Close()
	client := rolesetv1.NewConnectionServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	req := &rolesetv1.ResolveConnectionRequest{Reference: reference}

	gateways := []string{"rest"}
	addrs := []string{st.HTTPA}
	if bin := os.Getenv("MILLWRIGHT_BENCH_BASELINE_GATEWAY"); bin != "" {
		gateways, addrs = append(gateways, "base"), append(addrs, startGateway(b, st, bin))
	}
	if os.Getenv("MILLWRIGHT_BENCH_GATEWAY") == "inproc" {
		g, err := gw.New(context.Background(), gw.Upstreams{Policy: st.Policy, Roleset: st.Roleset, Billing: st.Billing},
			gateway.OpenAPI, nil)
		require.NoError(b, err)
		defer g.Close()
		srv := gw.Server("127.0.0.1:0", g, gw.DefaultLimits())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(b, err)
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		gateways, addrs = append(gateways, "inproc"), append(addrs, ln.Addr().String())
	}
	body := []byte(`{"reference":"` + reference + `"}`)
	// Each gateway is called by two clients, each on one keep-alive connection as a worker
	// would hold: net/http's (named after the gateway), and a plain one that writes the
	// request and reads the answer on the calling goroutine, as curl does (named "plain"):
	// net/http's client adds two goroutine hand-offs of its own (writeLoop, readLoop).
	var targets []string
	var calls []func() error
	for i, name := range gateways {
		targets = append(targets, name, name+"-plain")
		calls = append(calls, restClient(b, addrs[i], token, body), plainClient(b, addrs[i], token, body))
	}
	grpcCall := func() error { _, err := client.ResolveConnection(ctx, req); return err }

	for range 200 { // warm every path: connections, caches, the decision itself
		require.NoError(b, grpcCall())
		for _, call := range calls {
			require.NoError(b, call())
		}
	}
	var tg []time.Duration
	tr := make([][]time.Duration, len(calls))
	// The calls of an iteration take turns in first place (gRPC included): the call that
	// follows another can find the machine busy with that one's tail.
	order := make([]int, len(calls)+1) // -1 is the gRPC call
	for i := range order {
		order[i] = i - 1
	}
	// b.Loop runs this function once per -count (b.N would start a second stack).
	for n := 0; b.Loop(); n++ {
		for k := range order {
			i := order[(n+k)%len(order)]
			t0 := time.Now()
			if i < 0 {
				err = grpcCall()
			} else {
				err = calls[i]()
			}
			if err != nil {
				b.Fatal(err)
			}
			if i < 0 {
				tg = append(tg, time.Since(t0))
			} else {
				tr[i] = append(tr[i], time.Since(t0))
			}
		}
	}
	q := func(d []time.Duration, f float64) time.Duration { return d[int(f*float64(len(d)-1))] }
	slices.Sort(tg)
	b.ReportMetric(float64(q(tg, 0.5).Microseconds()), "grpc-p50-µs")
	b.ReportMetric(float64(q(tg, 0.9).Microseconds()), "grpc-p90-µs")
	for i, name := range targets {
		slices.Sort(tr[i])
		b.ReportMetric(float64(q(tr[i], 0.5).Microseconds()), name+"-p50-µs")
		b.ReportMetric(float64(q(tr[i], 0.9).Microseconds()), name+"-p90-µs")
		b.ReportMetric(float64(q(tr[i], 0.5))/float64(q(tg, 0.5)), name+"/grpc-p50")
	}
}

// startGateway runs the gateway binary bin against the stack's services and returns its
// address once it accepts connections; it is killed at cleanup.
func startGateway(b *testing.B, st *Stack, bin string) string {
	b.Helper()
	ports := freePorts(b, 1)
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	cmd := exec.Command(bin, "serve", "--http-addr", addr, "--policy-addr", st.Policy,
		"--roleset-addr", st.Roleset, "--billing-addr", st.Billing)
	// Its log goes to a file, as the stack's gateway's does: a log line's write is part of the cost.
	logf, err := os.Create(filepath.Join(b.TempDir(), "gateway.log"))
	require.NoError(b, err)
	cmd.Stderr = logf
	require.NoError(b, cmd.Start())
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("gateway %s not listening on %s", bin, addr)
	return ""
}

// restClient calls ResolveConnection through the gateway at addr with net/http's client.
func restClient(b *testing.B, addr, token string, body []byte) func() error {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	b.Cleanup(c.CloseIdleConnections)
	return func() error {
		hr, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/roleset/connections:resolve", bytes.NewReader(body))
		if err != nil {
			return err
		}
		hr.Header.Set("Authorization", "Bearer "+token)
		hr.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(hr)
		if err != nil {
			return err
		}
		return readAnswer(resp)
	}
}

// plainClient calls ResolveConnection through the gateway at addr on one connection that it
// writes and reads itself.
func plainClient(b *testing.B, addr, token string, body []byte) func() error {
	conn, err := net.Dial("tcp", addr)
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close() })
	req := []byte("POST /v1/roleset/connections:resolve HTTP/1.1\r\nHost: " + addr +
		"\r\nAuthorization: Bearer " + token + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
	r := bufio.NewReader(conn)
	return func() error {
		if _, err := conn.Write(req); err != nil {
			return err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return err
		}
		return readAnswer(resp)
	}
}

func readAnswer(resp *http.Response) error {
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("REST resolve: %d %s", resp.StatusCode, out)
	}
	return err
}
