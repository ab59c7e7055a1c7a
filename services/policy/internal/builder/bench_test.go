package builder

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// benchFlow builds a flow of n script steps over distinct paths, arranged the way large real
// flows are: groups of 40 steps, each group a for-loop holding plain steps, a branchone (one
// branch plus default) and a while-loop, with every tenth step version-pinned and every seventh
// carrying a worker tag.
func benchFlow(n, distinct int) []byte {
	var b strings.Builder
	step := 0
	writeSteps := func(k int) {
		for i := 0; i < k; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			extra := ""
			if step%10 == 0 {
				extra += fmt.Sprintf(`,"hash":"%016x"`, step)
			}
			if step%7 == 0 {
				extra += `,"tag_override":"gpu"`
			}
			fmt.Fprintf(&b, `{"id":"s%d","value":{"type":"script","path":"f/bench/script_%d","input_transforms":{"x":{"type":"javascript","expr":"flow_input.x + %d"},"y":{"type":"static","value":"v"}}%s},"summary":"step %d"}`,
				step, step%distinct, step, extra, step)
			step++
		}
	}
	b.WriteString(`{"modules":[`)
	for g := 0; step < n; g++ {
		if g > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"loop%d","value":{"type":"forloopflow","iterator":{"type":"javascript","expr":"flow_input.items"},"parallel":true,"skip_failures":true,"modules":[`, g)
		writeSteps(10)
		fmt.Fprintf(&b, `,{"id":"br%d","value":{"type":"branchone","branches":[{"summary":"a","expr":"results.s0 > 1","modules":[`, g)
		writeSteps(10)
		b.WriteString(`]}],"default":[`)
		writeSteps(10)
		fmt.Fprintf(&b, `]}},{"id":"wl%d","value":{"type":"whileloopflow","skip_failures":false,"modules":[`, g)
		writeSteps(10)
		b.WriteString(`]}}]}}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func TestBenchFlowShape(t *testing.T) {
	raw := benchFlow(10_000, 1_000)
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
	raw := benchFlow(10_000, 1_000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for i := 0; i < b.N; i++ {
		rep, err := WalkFlow(raw, Limits{})
		if err != nil || len(rep.Runnables) != 10_000 {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkStdUnmarshal10k is the baseline measured in the same run: encoding/json decoding the
// same bytes into interface{}, before any walk. The ratio WalkFlow/this is what to report.
func BenchmarkStdUnmarshal10k(b *testing.B) {
	raw := benchFlow(10_000, 1_000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for i := 0; i < b.N; i++ {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// The API walks the request's string without copying it; the answer must be WalkFlow's.
func TestWalkFlowStringSameReport(t *testing.T) {
	for _, raw := range [][]byte{benchFlow(400, 100), []byte(`{"value":{"modules":[]}}`), []byte(`{`), {0xff}} {
		want, wantErr := WalkFlow(raw, Limits{})
		got, gotErr := WalkFlowString(string(raw), Limits{})
		require.Equal(t, wantErr, gotErr)
		require.Equal(t, want, got)
	}
}
