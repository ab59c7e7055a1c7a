package builder

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/builder/buildertest"
)

// cpuTime is the process's user+system CPU time. The benchmarks report it per op next to wall
// time, because on a shared machine wall time mostly measures the neighbours; CPU time includes
// the GC's background work, which wall time on an idle machine would hide in parallelism.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// benchFlow10k runs op b.N times over the same 10,000-step flow (1,000 distinct paths), the
// input every benchmark of the walk and its baseline reads, and reports its CPU time too.
func benchFlow10k(b *testing.B, op func(raw []byte)) {
	raw := buildertest.Flow(10_000, 1_000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for i := 0; i < b.N; i++ {
		op(raw)
	}
	reportCPU(b, start)
}

func TestBenchFlowShape(t *testing.T) {
	raw := buildertest.Flow(10_000, 1_000)
	rep, err := WalkFlow(raw, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runnables) != 10_000 || len(rep.DistinctPaths()) != 1_000 || len(rep.Violations) != 0 {
		t.Fatalf("runnables %d distinct %d violations %d", len(rep.Runnables), len(rep.DistinctPaths()), len(rep.Violations))
	}
	if len(rep.Pins) != 1_000 {
		t.Fatalf("pins %d", len(rep.Pins))
	}
}

func BenchmarkWalkFlow10k(b *testing.B) {
	benchFlow10k(b, func(raw []byte) {
		rep, err := WalkFlow(raw, Limits{})
		if err != nil || len(rep.Runnables) != 10_000 {
			b.Fatal(err)
		}
		rep.Release() // as the service does once the answer is rendered
	})
}

// BenchmarkStdUnmarshal10k is the baseline measured in the same run: encoding/json decoding the
// same bytes into interface{}, before any walk. The ratio WalkFlow/this is what to report.
func BenchmarkStdUnmarshal10k(b *testing.B) {
	benchFlow10k(b, func(raw []byte) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			b.Fatal(err)
		}
	})
}

// The API walks the request's string without copying it; the answer must be WalkFlow's.
func TestWalkFlowStringSameReport(t *testing.T) {
	for _, raw := range [][]byte{buildertest.Flow(400, 100), []byte(`{"value":{"modules":[]}}`), []byte(`{`), {0xff}} {
		want, wantErr := WalkFlow(raw, Limits{})
		got, gotErr := WalkFlowString(string(raw), Limits{})
		require.Equal(t, wantErr, gotErr)
		require.Equal(t, want, got)
	}
}
