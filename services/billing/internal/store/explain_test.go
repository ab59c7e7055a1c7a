package store_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// BenchmarkExplain prints EXPLAIN ANALYZE of the seat query on the benchmark fixture (or of
// the statements in EXPLAIN_SQL, separated by ";;"; EXPLAIN_PREP runs first), to see where
// the time goes. It measures nothing itself.
func BenchmarkExplain(b *testing.B) {
	benchSetup(b)
	pl := pool(b, benchDSN)
	defer pl.Close()
	ctx := context.Background()
	p, err := pl.Acquire(ctx) // one session, so SET sticks
	require.NoError(b, err)
	defer p.Release()
	if prep := os.Getenv("EXPLAIN_PREP"); prep != "" {
		for _, stmt := range strings.Split(prep, ";") {
			_, err := p.Exec(ctx, stmt)
			require.NoError(b, err)
		}
	}
	if _, err := p.Exec(ctx, `SET work_mem = '`+os.Getenv("EXPLAIN_WORK_MEM")+`'`); err != nil && os.Getenv("EXPLAIN_WORK_MEM") != "" {
		b.Fatal(err)
	}
	qs := os.Getenv("EXPLAIN_SQL")
	if qs == "" {
		qs = `SELECT * FROM seat_usage(1000, 500)`
	}
	for _, q := range strings.Split(qs, ";;") {
		for range 2 { // the second run is warm
			rows, err := p.Query(ctx, `EXPLAIN (ANALYZE, TIMING OFF, BUFFERS) `+q)
			require.NoError(b, err)
			out, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(b, err)
			fmt.Fprintln(os.Stderr, q+"\n"+strings.Join(out, "\n"))
			start := time.Now()
			_, err = p.Exec(ctx, q)
			require.NoError(b, err)
			fmt.Fprintf(os.Stderr, "wall: %v\n\n", time.Since(start))
		}
	}
	for b.Loop() {
	}
}
