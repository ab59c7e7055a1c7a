package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/failpoint"
)

// TestFailpoints: Failpoints is exactly the failpoint.Hit sites of policy and of pkg/stream's listener,
// so the chaos test can reach every one and picks no stale name.
func TestFailpoints(t *testing.T) {
	require.NoError(t, failpoint.CheckNames(Failpoints, "../..", "../../../../pkg/stream/stream.go"))
}
