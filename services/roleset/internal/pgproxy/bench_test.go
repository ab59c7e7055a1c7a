package pgproxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
)

// Sizes of the benchmark's loads: the goals are for COPY of 100 MB and for a thousand
// concurrent proxied sessions (the proxy's default MaxSessions).
const (
	copyBytes    = 100 << 20
	idleSessions = 1000
)

// BenchmarkProxy measures the proxy against direct connections to the same server as the same
// login, in the same run: connect, SELECT 1 on an open session (p50), COPY of 100 MB in and
// out (throughput), and the memory of an idle proxied session with a thousand of them open. It
// runs once without TLS and once with TLS on both legs (client to proxy, proxy to server,
// against client to server), on a cluster of its own with ssl on; the shared test cluster has
// none. The clients run in this process too; the memory figure subtracts what the same number
// of direct clients take.
func BenchmarkProxy(b *testing.B) {
	superDSN := pgtest.NewCluster(b, pgtest.ClusterOptions{TLS: true, MaxConnections: idleSessions + 100})
	data := copyData()
	for _, sslmode := range []string{"disable", "require"} {
		b.Run("sslmode="+sslmode, func(b *testing.B) {
			f := newFixtureOn(b, superDSN, sslmode, Config{TLS: selfSignedTLS(b)})
			benchProxy(b, f, f.dsn(testUser, testPassword, sslmode), data)
		})
	}
}

func benchProxy(b *testing.B, f *fixture, proxied string, data []byte) {
	ctx := context.Background()
	connect := func(b *testing.B, dsn string) *pgconn.PgConn {
		c, err := pgconn.Connect(ctx, dsn)
		require.NoError(b, err)
		return c
	}
	// both runs fn on a direct session and on a proxied one, alternately, and returns how
	// long each call took.
	both := func(b *testing.B, fn func(*pgconn.PgConn)) (direct, proxy []time.Duration) {
		d, p := connect(b, f.upstream), connect(b, proxied)
		defer d.Close(ctx)
		defer p.Close(ctx)
		for b.Loop() {
			direct, proxy = append(direct, timed(func() { fn(d) })), append(proxy, timed(func() { fn(p) }))
		}
		return direct, proxy
	}

	b.Run("connect", func(b *testing.B) {
		var direct, proxy []time.Duration
		for b.Loop() {
			direct = append(direct, timed(func() { connect(b, f.upstream).Close(ctx) }))
			proxy = append(proxy, timed(func() { connect(b, proxied).Close(ctx) }))
		}
		reportP50(b, direct, proxy)
	})

	b.Run("select1", func(b *testing.B) {
		direct, proxy := both(b, func(c *pgconn.PgConn) {
			_, err := c.Exec(ctx, "SELECT 1").ReadAll()
			require.NoError(b, err)
		})
		reportP50(b, direct, proxy)
	})

	// COPY into an unlogged table the login owns: the server's work is small, so the figure
	// is mostly the bytes' way there.
	table := "copy_" + f.login
	_, err := f.super.Exec(ctx, fmt.Sprintf(`CREATE UNLOGGED TABLE %s (line text); ALTER TABLE %[1]s OWNER TO %s`, table, f.login))
	require.NoError(b, err)
	b.Cleanup(func() { // before the fixture drops the login, which owns it
		_, err := f.super.Exec(ctx, "DROP TABLE "+table)
		require.NoError(b, err)
	})
	b.Run("copy-in", func(b *testing.B) {
		direct, proxy := both(b, func(c *pgconn.PgConn) {
			_, err := c.Exec(ctx, "TRUNCATE "+table).ReadAll()
			require.NoError(b, err)
			_, err = c.CopyFrom(ctx, bytes.NewReader(data), "COPY "+table+" FROM STDIN")
			require.NoError(b, err)
		})
		reportThroughput(b, direct, proxy)
	})
	b.Run("copy-out", func(b *testing.B) {
		lines := int64(bytes.Count(data, []byte("\n")))
		direct, proxy := both(b, func(c *pgconn.PgConn) {
			tag, err := c.CopyTo(ctx, io.Discard, "COPY "+table+" TO STDOUT")
			require.NoError(b, err)
			require.Equal(b, lines, tag.RowsAffected())
		})
		reportThroughput(b, direct, proxy)
	})

	b.Run("idle-memory", func(b *testing.B) {
		// open opens idleSessions sessions at once (a few start-ups in flight at a time, as a
		// pool filling up would), checks that each answers, and returns the bytes in use
		// with them open.
		open := func(dsn string) uint64 {
			conns := make([]*pgconn.PgConn, idleSessions)
			defer func() {
				for _, c := range conns {
					if c != nil {
						c.Close(ctx)
					}
				}
			}()
			var wg sync.WaitGroup
			next := make(chan int)
			errs := make(chan error, idleSessions)
			for range 8 {
				wg.Go(func() {
					for i := range next {
						c, err := pgconn.Connect(ctx, dsn)
						if err == nil {
							_, err = c.Exec(ctx, "SELECT 1").ReadAll()
						}
						conns[i] = c
						errs <- err
					}
				})
			}
			for i := range conns {
				next <- i
			}
			close(next)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(b, err)
			}
			var backends int
			require.NoError(b, f.super.QueryRow(ctx,
				`SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, f.login).Scan(&backends))
			require.Equal(b, idleSessions, backends)
			time.Sleep(100 * time.Millisecond) // the relays settle into their reads
			return inUse()
		}
		// Measured once, whatever b.N: it is a size, not a rate.
		base := inUse()
		direct := open(f.upstream) - base
		proxy := open(proxied) - base
		for b.Loop() {
		}
		b.ReportMetric((float64(proxy)-float64(direct))/idleSessions, "B/idle-session")
	})
}

// copyData is copyBytes of COPY text: lines of 99 characters and a newline.
func copyData() []byte {
	line := strings.Repeat("x", 99) + "\n"
	return bytes.Repeat([]byte(line), copyBytes/len(line))
}

func timed(fn func()) time.Duration {
	start := time.Now()
	fn()
	return time.Since(start)
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

// reportThroughput reports the median throughput of COPY of copyBytes each way; its ratio is
// proxy over direct (the goal is a floor, not a ceiling).
func reportThroughput(b *testing.B, direct, proxy []time.Duration) {
	pd, pp := p50(direct), p50(proxy)
	mbps := func(d time.Duration) float64 { return copyBytes / d.Seconds() / (1 << 20) }
	b.ReportMetric(mbps(pd), "direct-MB/s")
	b.ReportMetric(mbps(pp), "proxy-MB/s")
	b.ReportMetric(float64(pd)/float64(pp), "ratio")
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
