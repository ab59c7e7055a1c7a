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

// Alloc returns the bytes f allocates. It collects garbage first so a collection triggered by
// earlier work does not land inside the measurement; TotalAlloc counts allocations, not live
// heap, so a collection during f does not hide anything.
func Alloc(f func()) uint64 {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// Measure runs run at every scale; run builds its input for scale s, does the work, and
// returns the input and answer sizes. The smallest of three runs is kept, so that a pooled
// buffer filled by the first run is measured as a busy process would see it.
func Measure(scales []int, run func(s int) (input, answer int)) []Point {
	out := make([]Point, 0, len(scales))
	for _, s := range scales {
		p := Point{Scale: s}
		for i := 0; i < 3; i++ {
			var in, ans int
			a := Alloc(func() { in, ans = run(s) })
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
	// MaxAllocPerByte and MaxAnswerPerByte are absolute ceilings at every scale (0: unchecked).
	MaxAllocPerByte  float64
	MaxAnswerPerByte float64
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
		if l.MaxAnswerPerByte > 0 && p.AnswerPerByte() > l.MaxAnswerPerByte {
			t.Errorf("%s: %.2f answer bytes per input byte at scale %d, the ceiling is %.2f", name, p.AnswerPerByte(), p.Scale, l.MaxAnswerPerByte)
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
