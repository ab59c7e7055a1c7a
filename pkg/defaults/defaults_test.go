package defaults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPositive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v, def time.Duration
		want   time.Duration
	}{
		{"set", 3 * time.Second, time.Minute, 3 * time.Second},
		{"zero is unset", 0, time.Minute, time.Minute},
		{"negative is unset", -1, time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Positive(tc.v, tc.def))
		})
	}
	require.Equal(t, 7, Positive(0, 7), "plain ints too")
}
