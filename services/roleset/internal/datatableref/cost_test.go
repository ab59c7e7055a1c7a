package datatableref

import (
	"runtime"
	"strings"
	"testing"
)

// allocPerCall is the average number of bytes fn allocates.
func allocPerCall(fn func()) uint64 {
	const n = 20
	fn()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		fn()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / n
}

// TestParseCostBounded: references are untrusted and arrive up to the gRPC message limit.
// The work done for one, and the size of the refusal, are bounded by MaxLen whatever its
// length: 1x, 4x and 16x an adversarial input (a pasted URL with userinfo, nested escapes, a
// long role) cost the same, within a small constant.
func TestParseCostBounded(t *testing.T) {
	shapes := map[string]func(n int) (string, string){
		"userinfo":  func(n int) (string, string) { return "datatable://" + strings.Repeat("u:p@", n) + "main", "" },
		"query":     func(n int) (string, string) { return "datatable://main?" + strings.Repeat("role=a&", n), "" },
		"escapes":   func(n int) (string, string) { return "datatable://main?role=" + strings.Repeat("%25%00", n), "" },
		"agent":     func(n int) (string, string) { return strings.Repeat("m", n), strings.Repeat("r", n) },
		"non-utf-8": func(n int) (string, string) { return "datatable://" + strings.Repeat("\xff", n), "" },
	}
	const base = 16 << 10 // 16 KiB, then 64 KiB and 256 KiB
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			var allocs [3]uint64
			for i, mult := range []int{1, 4, 16} {
				ref, role := shape(base * mult / 4)
				var err error
				run := func() {
					if role != "" {
						_, err = FromAgent(ref, role)
					} else {
						_, err = Parse(ref)
					}
				}
				allocs[i] = allocPerCall(run)
				if err == nil {
					t.Fatalf("%d bytes accepted", len(ref))
				}
				if n := len(err.Error()); n > 2*MaxLen {
					t.Fatalf("refusal of %d bytes is %d bytes long", len(ref), n)
				}
			}
			// Bounded: 16x the input may not cost more than the 1x input plus a few KiB.
			if allocs[2] > allocs[0]+4<<10 {
				t.Fatalf("allocations grow with the input: %v bytes at 1x, 4x, 16x", allocs)
			}
			t.Logf("bytes allocated at 1x, 4x, 16x: %v", allocs)
		})
	}
}
