package builder

import (
	"testing"

	"github.com/millwright/millwright/pkg/costtest"
	"github.com/millwright/millwright/services/policy/internal/builder/buildertest"
)

// The answer a check renders from a report, with the service's caps (internal/api: at most 100
// findings, 1,000 entries per list): what the tests below measure as answer size.
const answerListed = 1000

func answerFlow(rep FlowReport) int {
	n := 0
	for _, v := range rep.Violations {
		n += len(v.Pointer.String()) + len(v.Message)
	}
	for i, r := range rep.Runnables {
		if i < answerListed {
			n += len(r.Path) + len(r.Pointer.String())
		}
	}
	for i, r := range rep.Tags {
		if i < answerListed {
			n += len(r.Tag) + len(r.Pointer.String())
		}
	}
	for i, r := range rep.Pins {
		if i < answerListed {
			n += len(r.Path) + len(r.Pointer.String())
		}
	}
	return n
}

func answerApp(rep AppReport) int {
	n := 0
	for _, v := range rep.Violations {
		n += len(v.Pointer.String()) + len(v.Message)
	}
	for _, rs := range [][]RunnableRef{rep.PolicyPaths, rep.ValuePaths} {
		for i, r := range rs {
			if i < answerListed {
				n += len(r.Path) + len(r.Pointer.String())
			}
		}
	}
	return n
}

var costScales = []int{1, 4, 16}

// costLimits: per input byte, the largest input may cost at most twice what the smallest does
// (linear growth; before issue 11 FlowDeepSweep grew 20x between x1 and x16), no input may
// allocate more than 48 bytes per input byte (the worst, FlowDeepSweep at x1, renders 100
// pointers of 1 KiB for 2 KiB of input), and no answer may exceed 2 MiB (1,000 entries per list).
var costLimits = costtest.Limits{Slack: 2, MaxAllocPerByte: 48, MaxAnswerBytes: 2 << 20}

var costFlows = []struct {
	name string
	gen  func(int) []byte
}{
	{"flow_deep_sweep", buildertest.FlowDeepSweep},
	{"flow_deep_steps", buildertest.FlowDeepSteps},
	{"flow_deep_rawscripts", buildertest.FlowDeepRawscripts},
	{"json_wide_object", buildertest.JSONWideObject},
	{"json_deep", buildertest.JSONDeep},
}

var costApps = []struct {
	name string
	gen  func(int) ([]byte, []byte)
}{
	{"app_colon_keys", buildertest.AppColonKeys},
	{"app_deep_inline", buildertest.AppDeepInline},
	{"app_many_keys", buildertest.AppManyKeys},
}

// TestCostLinear is issue 11 item 1's proof: for the worst input found for every walk and the
// parser, at 1x, 4x and 16x size, bytes allocated (TotalAlloc deltas, pooled buffers warm) and
// answer bytes per input byte stay flat and under an absolute ceiling.
func TestCostLinear(t *testing.T) {
	for _, c := range costFlows {
		t.Run(c.name, func(t *testing.T) {
			pts := costtest.Measure(costScales, func(s int) func() (int, int) {
				raw := c.gen(s)
				return func() (int, int) {
					rep, err := WalkFlow(raw, Limits{})
					if err != nil {
						t.Fatal(err)
					}
					n := answerFlow(rep)
					rep.Release()
					return len(raw), n
				}
			})
			costtest.AssertLinear(t, c.name, pts, costLimits)
		})
	}
	for _, c := range costApps {
		t.Run(c.name, func(t *testing.T) {
			pts := costtest.Measure(costScales, func(s int) func() (int, int) {
				v, p := c.gen(s)
				return func() (int, int) {
					rep, err := WalkApp(v, p, Limits{}, AppOptions{})
					if err != nil {
						t.Fatal(err)
					}
					n := answerApp(rep)
					rep.Release()
					return len(v) + len(p), n
				}
			})
			costtest.AssertLinear(t, c.name, pts, costLimits)
		})
	}
	t.Run("preview_colon_path", func(t *testing.T) {
		pts := costtest.Measure(costScales, func(s int) func() (int, int) {
			p := PreviewColonPath(s)
			return func() (int, int) {
				vs := CheckPreview(p, false, true)
				refs, _ := PreviewRefs(p)
				n := 0
				for _, v := range vs {
					n += len(v.Message)
				}
				for _, r := range refs {
					n += len(r.Path)
				}
				return len(p), n
			}
		})
		costtest.AssertLinear(t, "preview_colon_path", pts, costLimits)
	})
}

// PreviewColonPath is buildertest's, here so the preview case reads like the others.
var PreviewColonPath = buildertest.PreviewColonPath

// BenchmarkCost reports, for every adversarial input at 16x, bytes allocated and answer bytes
// per input byte (docs/benchmarks.md: "builder: cost per input byte").
func BenchmarkCost(b *testing.B) {
	const s = 16
	for _, c := range costFlows {
		raw := c.gen(s)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			ans := 0
			for i := 0; i < b.N; i++ {
				rep, _ := WalkFlow(raw, Limits{})
				ans = answerFlow(rep)
				rep.Release()
			}
			b.ReportMetric(float64(ans)/float64(len(raw)), "answer-B/B")
		})
	}
	for _, c := range costApps {
		v, p := c.gen(s)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(v) + len(p)))
			b.ReportAllocs()
			ans := 0
			for i := 0; i < b.N; i++ {
				rep, _ := WalkApp(v, p, Limits{}, AppOptions{})
				ans = answerApp(rep)
				rep.Release()
			}
			b.ReportMetric(float64(ans)/float64(len(v)+len(p)), "answer-B/B")
		})
	}
}
