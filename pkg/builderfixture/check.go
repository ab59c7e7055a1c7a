package builderfixture

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Outcome is a transport-independent answer.
type Outcome struct {
	Code             string
	Violations       []Violation
	CodeFindings     []Violation
	Refs             []string
	NormalizedPolicy string
}

// OrNone returns s, or an empty slice for nil.
func OrNone[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Check compares an answer with the case; every runner reaches its verdict here.
func Check(t *testing.T, c Case, o Outcome) {
	t.Helper()
	require.Equal(t, c.Expect.Code, o.Code, "violations: %v", o.Violations)
	switch c.Expect.Code {
	case "OK":
		assert.Empty(t, o.Violations)
		assert.Equal(t, OrNone(c.Expect.CodeFindings), OrNone(o.CodeFindings), "code_findings")
		if c.Expect.Refs != nil {
			assert.Equal(t, c.Expect.Refs, o.Refs, "references")
		}
		if len(c.Expect.NormalizedPolicy) > 0 {
			assert.JSONEq(t, string(c.Expect.NormalizedPolicy), o.NormalizedPolicy, "normalized policy")
		}
		if c.RPC == "app" && c.Caller == "operator" {
			var p map[string]any
			require.NoError(t, json.Unmarshal([]byte(o.NormalizedPolicy), &p))
			assert.Equal(t, true, p["sandbox"], "an operator's app is always sandboxed")
		}
	case "INVALID_ARGUMENT":
		require.Len(t, o.Violations, 1)
		want := c.Expect.Violations[0]
		if want.Reason != "" {
			assert.Equal(t, want.Reason, o.Violations[0].Reason)
		} else {
			assert.Contains(t, []string{"INVALID_FIELD", "VALUE_TOO_LARGE"}, o.Violations[0].Reason)
		}
		if want.Doc != "" {
			assert.Equal(t, want.Doc, o.Violations[0].Doc)
		}
		assert.Equal(t, want.Pointer, o.Violations[0].Pointer)
	default:
		assert.Equal(t, OrNone(c.Expect.Violations), o.Violations, "violations")
	}
}
