package itest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/services/roleset/internal/api"
	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/store"
)

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkResolveWarm interleaves a warm ResolveConnection (set login, cached) with a bare
// loopback gRPC unary call (health Check on a server with no interceptors), in the same run,
// and reports both p50s and their ratio (goal <= 1.5). The ResolveConnection is timed twice
// per iteration, on the same engine and cache: with the audit trail on (the replica's server,
// recording as in production: the repeats of the decision are counted, not written) and
// off (a server without the audit step); each path's p50, its throughput (calls per second
// of its own time), and the ratios are reported.
func BenchmarkResolveWarm(b *testing.B) {
	f := newBenchFixture(b)
	bare := serveGRPC(b, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, healthgrpc.NewServer()) })
	hc := healthpb.NewHealthClient(dial(b, bare))
	tok := f.viewerRun("carol@x")
	ctx := bearerCtx(tok)
	req := &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main?as=viewer"}
	on := f.r.conns()
	off := rolesetv1.NewConnectionServiceClient(serveAPI(b, &api.Server{Engine: f.r.eng, Stream: f.r.stream}, adminOnly))
	_, err := on.ResolveConnection(ctx, req)
	require.NoError(b, err)
	for range 200 { // warm every connection
		_, _ = hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		_, _ = on.ResolveConnection(ctx, req)
		_, _ = off.ResolveConnection(ctx, req)
	}
	calls := f.policy.Calls()
	var tb, ton, toff []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := on.ResolveConnection(ctx, req); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := off.ResolveConnection(ctx, req); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		tb, ton, toff = append(tb, t1.Sub(t0)), append(ton, t2.Sub(t1)), append(toff, t3.Sub(t2))
	}
	b.StopTimer()
	require.Equal(b, calls, f.policy.Calls(), "the warm path calls no policy")
	perSecond := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return float64(len(d)) / sum.Seconds()
	}
	pb, pon, poff := p50(tb), p50(ton), p50(toff)
	b.ReportMetric(float64(pb.Microseconds()), "bare-p50-µs")
	b.ReportMetric(float64(pon.Microseconds()), "resolve-p50-µs")
	b.ReportMetric(float64(poff.Microseconds()), "noaudit-p50-µs")
	b.ReportMetric(perSecond(tb), "bare-calls/s")
	b.ReportMetric(perSecond(ton), "resolve-calls/s")
	b.ReportMetric(perSecond(toff), "noaudit-calls/s")
	b.ReportMetric(float64(pon)/float64(pb), "ratio")
	b.ReportMetric(float64(poff)/float64(pb), "noaudit-ratio")
	b.ReportMetric(float64(pon)/float64(poff), "audit-cost")
}

// BenchmarkSetLoginCold interleaves a cold set-login creation through the engine (lock,
// catalog check, verifier, CREATE ROLE ... IN ROLE + verification, row, commit) with a bare
// "BEGIN; CREATE ROLE ... LOGIN PASSWORD '<plaintext>'; GRANT a, b TO ...; COMMIT" on the same
// cluster, dropping both between iterations (untimed), and reports p50s and the ratio (goal
// <= 2).
func BenchmarkSetLoginCold(b *testing.B) {
	f := newBenchFixture(b)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, f.targetDSN)
	require.NoError(b, err)
	defer admin.Close(ctx)
	st := store.New(f.r.pool)
	emea, err := st.Role(ctx, mustID(f.emea.GetRoleId()))
	require.NoError(b, err)
	apac, err := st.Role(ctx, mustID(f.apac.GetRoleId()))
	require.NoError(b, err)
	cl, err := st.GetCluster(ctx, f.clusterID)
	require.NoError(b, err)
	login := f.setLogin(&testing.T{}, f.emea.GetOid(), f.apac.GetOid())
	var tb, te []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("bare_%s_%d", randHex(4), i)
		t0 := time.Now()
		_, err := admin.Exec(ctx, fmt.Sprintf(`BEGIN; CREATE ROLE %s LOGIN PASSWORD '%s'; GRANT "%s", "%s" TO %s; COMMIT`,
			name, secret.NewPassword(), emea.Name, apac.Name, name))
		t1 := time.Now()
		require.NoError(b, err)
		_, _, err = f.r.eng.EnsureSetLogin(ctx, cl, []store.Role{emea, apac}, f.targetDB)
		t2 := time.Now()
		require.NoError(b, err)
		tb, te = append(tb, t1.Sub(t0)), append(te, t2.Sub(t1))
		b.StopTimer()
		_, err = admin.Exec(ctx, `DROP ROLE `+name)
		require.NoError(b, err)
		_, err = f.r.eng.RetireSetLogin(ctx, f.clusterID, login, "bench", false)
		require.NoError(b, err)
		b.StartTimer()
	}
	b.StopTimer()
	pb, pe := p50(tb), p50(te)
	b.ReportMetric(float64(pb.Microseconds()), "bare-p50-µs")
	b.ReportMetric(float64(pe.Microseconds()), "ensure-p50-µs")
	b.ReportMetric(float64(pe)/float64(pb), "ratio")
}

// newBenchFixture is newFixture for a benchmark (fixtures take a *testing.T for t.Run-less
// helpers; a benchmark's TB works the same).
func newBenchFixture(b *testing.B) *fixture {
	return newFixtureTB(b)
}
