package costtest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Point is one measurement: the input and answer sizes in bytes and the bytes allocated.
type Point struct {
	Scale  int
	Input  int
	Alloc  uint64
	Answer int
}

// AllocPerByte is bytes allocated per input byte.
func (p Point) AllocPerByte() float64 { return float64(p.Alloc) / float64(p.Input) }

// AnswerPerByte is answer bytes per input byte.
func (p Point) AnswerPerByte() float64 { return float64(p.Answer) / float64(p.Input) }

// Alloc returns the bytes f allocates. It collects garbage twice first, which also empties
// every sync.Pool, so f is measured cold, as the first request after a collection pays:
// deterministic, and the worst case. TotalAlloc counts allocations, not live heap, so a
// collection during f does not hide anything.
func Alloc(f func()) uint64 {
	runtime.GC()
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// Measure calls setup at every scale, outside the measurement, to build the input of scale s;
// the work it returns is what is measured, and reports the input and answer sizes. The
// smallest of three runs is kept (they differ only by runtime noise).
func Measure(scales []int, setup func(s int) (work func() (input, answer int))) []Point {
	out := make([]Point, 0, len(scales))
	for _, s := range scales {
		p := Point{Scale: s}
		run := setup(s)
		for i := 0; i < 3; i++ {
			var in, ans int
			a := Alloc(func() { in, ans = run() })
			if i == 0 || a < p.Alloc {
				p.Alloc = a
			}
			p.Input, p.Answer = in, ans
		}
		out = append(out, p)
	}
	return out
}

// Limits are what AssertLinear checks.
type Limits struct {
	// Slack: the largest scale may cost at most Slack times the per-byte cost of the smallest
	// (1 would be exactly linear; fixed overheads make small inputs relatively dearer, never
	// cheaper, so a modest slack only admits linear growth).
	Slack float64
	// MaxAllocPerByte is an absolute ceiling on bytes allocated per input byte, at every scale
	// (0: unchecked).
	MaxAllocPerByte float64
	// MaxAnswerBytes is an absolute ceiling on the answer, at every scale (0: unchecked): answers
	// are capped, so their size per input byte falls as inputs grow.
	MaxAnswerBytes int
}

// AssertLinear fails t unless allocation and answer size per input byte stay within l.
func AssertLinear(t testing.TB, name string, pts []Point, l Limits) {
	t.Helper()
	t.Log(Table(name, pts))
	first, last := pts[0], pts[len(pts)-1]
	if last.AllocPerByte() > l.Slack*first.AllocPerByte() {
		t.Errorf("%s: allocation grows faster than the input: %.1f B/B at scale %d, %.1f B/B at scale %d", name, first.AllocPerByte(), first.Scale, last.AllocPerByte(), last.Scale)
	}
	if first.Answer > 0 && last.AnswerPerByte() > l.Slack*first.AnswerPerByte() {
		t.Errorf("%s: answer grows faster than the input: %.2f B/B at scale %d, %.2f B/B at scale %d", name, first.AnswerPerByte(), first.Scale, last.AnswerPerByte(), last.Scale)
	}
	for _, p := range pts {
		if l.MaxAllocPerByte > 0 && p.AllocPerByte() > l.MaxAllocPerByte {
			t.Errorf("%s: %.1f bytes allocated per input byte at scale %d, the ceiling is %.0f", name, p.AllocPerByte(), p.Scale, l.MaxAllocPerByte)
		}
		if l.MaxAnswerBytes > 0 && p.Answer > l.MaxAnswerBytes {
			t.Errorf("%s: %d answer bytes at scale %d, the ceiling is %d", name, p.Answer, p.Scale, l.MaxAnswerBytes)
		}
	}
}

// Table renders points for a log or a document.
func Table(name string, pts []Point) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:\n", name)
	for _, p := range pts {
		fmt.Fprintf(&b, "  x%-3d input %9d B  alloc %12d B (%8.1f B/B)  answer %10d B (%7.2f B/B)\n",
			p.Scale, p.Input, p.Alloc, p.AllocPerByte(), p.Answer, p.AnswerPerByte())
	}
	return b.String()
}
