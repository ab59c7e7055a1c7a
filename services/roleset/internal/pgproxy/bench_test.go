package pgproxy

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// BenchmarkProxy measures the proxy against direct connections to the same server, in the
// same run (both SCRAM, no TLS: the test server has none): connect, SELECT 1 on an open
// session (p50), and the memory of an idle proxied session. The clients run in this process
// too; the memory figure subtracts what the same number of direct clients take.
func BenchmarkProxy(b *testing.B) {
	f := newFixture(b, Config{})
	proxied := f.dsn(testUser, testPassword, "disable")
	ctx := context.Background()
	connect := func(b *testing.B, dsn string) *pgconn.PgConn {
		c, err := pgconn.Connect(ctx, dsn)
		require.NoError(b, err)
		return c
	}

	b.Run("connect", func(b *testing.B) {
		var direct, proxy []time.Duration
		for b.Loop() {
			start := time.Now()
			connect(b, f.upstream).Close(ctx)
			mid := time.Now()
			connect(b, proxied).Close(ctx)
			direct, proxy = append(direct, mid.Sub(start)), append(proxy, time.Since(mid))
		}
		reportP50(b, direct, proxy)
	})

	b.Run("select1", func(b *testing.B) {
		d, p := connect(b, f.upstream), connect(b, proxied)
		defer d.Close(ctx)
		defer p.Close(ctx)
		timed := func(c *pgconn.PgConn) time.Duration {
			start := time.Now()
			_, err := c.Exec(ctx, "SELECT 1").ReadAll()
			require.NoError(b, err)
			return time.Since(start)
		}
		var direct, proxy []time.Duration
		for b.Loop() {
			direct, proxy = append(direct, timed(d)), append(proxy, timed(p))
		}
		reportP50(b, direct, proxy)
	})

	b.Run("idle-memory", func(b *testing.B) {
		const n = 100
		// open opens n sessions and returns the bytes in use with them open.
		open := func(dsn string) uint64 {
			conns := make([]*pgconn.PgConn, n)
			for i := range conns {
				conns[i] = connect(b, dsn)
			}
			defer func() {
				for _, c := range conns {
					c.Close(ctx)
				}
			}()
			time.Sleep(100 * time.Millisecond) // the relays settle into their reads
			return inUse()
		}
		// Measured once, whatever b.N: it is a size, not a rate.
		base := inUse()
		direct := open(f.upstream) - base
		proxy := open(proxied) - base
		for b.Loop() {
		}
		b.ReportMetric((float64(proxy)-float64(direct))/n, "B/idle-session")
	})
}

// inUse is the heap and stack in use after a GC.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

func reportP50(b *testing.B, direct, proxy []time.Duration) {
	pd, pp := p50(direct), p50(proxy)
	b.ReportMetric(float64(pd.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(pp.Microseconds()), "proxy-p50-µs")
	b.ReportMetric(float64(pp)/float64(pd), "ratio")
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
