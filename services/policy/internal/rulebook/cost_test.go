package rulebook_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/millwright/millwright/pkg/costtest"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// ResultCacheKey canonicalizes a request's args (up to 1 MiB): its cost must be linear in them
// too (issue 11 item 1), for a wide object, deep nesting and long keys alike.
func TestCanonicalArgsCostLinear(t *testing.T) {
	gens := map[string]func(s int) []byte{
		"wide": func(s int) []byte {
			parts := make([]string, 500*s)
			for i := range parts {
				parts[i] = fmt.Sprintf(`"k%d":{"b":[1,"x"],"a":null}`, i)
			}
			return []byte(`{` + strings.Join(parts, ",") + `}`)
		},
		// s copies of one value nested 60 deep under 200-byte keys: a canonicalizer that
		// re-encoded each level's subtree would pay depth x size.
		"deep_long_keys": func(s int) []byte {
			v := `[` + strings.Repeat(`[1,2,"3",{"z":1,"a":2}],`, 200) + `0]`
			for i := 0; i < 60; i++ {
				v = fmt.Sprintf(`{"%s%d":%s}`, strings.Repeat("k", 200), i, v)
			}
			parts := make([]string, s)
			for i := range parts {
				parts[i] = fmt.Sprintf(`"a%d":%s`, i, v)
			}
			return []byte(`{` + strings.Join(parts, ",") + `}`)
		},
	}
	for name, gen := range gens {
		t.Run(name, func(t *testing.T) {
			pts := costtest.Measure([]int{1, 4, 16}, func(s int) func() (int, int) {
				in := gen(s)
				return func() (int, int) {
					args, err := rulebook.CanonicalArgs(in)
					if err != nil {
						t.Fatal(err)
					}
					return len(in), len(args)
				}
			})
			costtest.AssertLinear(t, name, pts, costtest.Limits{Slack: 2, MaxAllocPerByte: 64})
		})
	}
}
