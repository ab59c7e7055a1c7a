package e2e

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
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
// one loop so both see the same machine load. It reports both p50s and p90s and the ratio of
// the p50s (goal <= 2: two hops cannot cost less than about 2x one).
//
// With MILLWRIGHT_BENCH_GATEWAY=inproc the REST calls go to a gateway built in this process
// against the same upstreams, so that -cpuprofile and -memprofile see the gateway's work.
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

	base := st.HTTP
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
		base = "http://" + ln.Addr().String()
	}
	// One keep-alive connection, as a worker's client would hold.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	body := []byte(`{"reference":"` + reference + `"}`)
	rest := func() error {
		hr, err := http.NewRequest(http.MethodPost, base+"/v1/roleset/connections:resolve", bytes.NewReader(body))
		if err != nil {
			return err
		}
		hr.Header.Set("Authorization", "Bearer "+token)
		hr.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(hr)
		if err != nil {
			return err
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			b.Fatalf("REST resolve: %d %s", resp.StatusCode, raw)
		}
		return err
	}
	grpcCall := func() error { _, err := client.ResolveConnection(ctx, req); return err }

	for range 200 { // warm both paths: connections, caches, the decision itself
		require.NoError(b, grpcCall())
		require.NoError(b, rest())
	}
	var tg, tr []time.Duration
	// b.Loop runs this function once per -count (b.N would start a second stack).
	for b.Loop() {
		t0 := time.Now()
		if err := grpcCall(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := rest(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		tg, tr = append(tg, t1.Sub(t0)), append(tr, t2.Sub(t1))
	}
	slices.Sort(tg)
	slices.Sort(tr)
	q := func(d []time.Duration, f float64) time.Duration { return d[int(f*float64(len(d)-1))] }
	b.ReportMetric(float64(q(tg, 0.5).Microseconds()), "grpc-p50-µs")
	b.ReportMetric(float64(q(tg, 0.9).Microseconds()), "grpc-p90-µs")
	b.ReportMetric(float64(q(tr, 0.5).Microseconds()), "rest-p50-µs")
	b.ReportMetric(float64(q(tr, 0.9).Microseconds()), "rest-p90-µs")
	b.ReportMetric(float64(q(tr, 0.5))/float64(q(tg, 0.5)), "rest/grpc-p50")
}
