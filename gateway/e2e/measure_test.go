package e2e

// What TestSoak measures with: a bounded latency histogram, and the services' own gauges read
// from their /metrics.

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// scrapeMetrics reads the named unlabelled gauges from a Prometheus /metrics endpoint.
func scrapeMetrics(ctx context.Context, addr string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && slices.Contains(names, name) {
			if out[name], err = strconv.ParseFloat(value, 64); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("no %s", n)
		}
	}
	return out, nil
}

// rpcStats counts one RPC's calls and their outcomes, and times them.
type rpcStats struct {
	calls, errors, wrong atomic.Int64
	latency              latencies
}

// latencies is a histogram of call durations in buckets 5% wide from 10 µs, so that a run of
// any length keeps a few KiB per RPC; a quantile is read as its bucket's upper bound (at most
// 5% high).
type latencies struct{ buckets [420]atomic.Int64 }

const latencyBase, latencyGrowth = 10 * time.Microsecond, 1.05

func (h *latencies) add(d time.Duration) {
	i := 0
	if d > latencyBase {
		i = int(math.Ceil(math.Log(float64(d)/float64(latencyBase)) / math.Log(latencyGrowth)))
	}
	h.buckets[min(i, len(h.buckets)-1)].Add(1)
}

func (h *latencies) quantile(q float64) time.Duration {
	var n int64
	for i := range h.buckets {
		n += h.buckets[i].Load()
	}
	var seen int64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if n > 0 && float64(seen) >= q*float64(n) {
			return time.Duration(float64(latencyBase) * math.Pow(latencyGrowth, float64(i))).Round(10 * time.Microsecond)
		}
	}
	return 0
}
