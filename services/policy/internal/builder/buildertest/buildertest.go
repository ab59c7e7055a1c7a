package buildertest

import (
	"fmt"
	"strings"
)

// Flow builds a flow of n script steps over distinct paths, arranged the way large real
// flows are: groups of 40 steps, each group a for-loop holding plain steps, a branchone (one
// branch plus default) and a while-loop, with every tenth step version-pinned and every seventh
// carrying a worker tag.
func Flow(n, distinct int) []byte {
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
