package builderflag_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/builderflag"
)

func TestOn(t *testing.T) {
	for _, ex := range builderflag.Examples {
		t.Run(ex.Settings, func(t *testing.T) {
			require.Equal(t, ex.On, builderflag.On([]byte(ex.Settings)))
		})
	}
	for _, notObject := range []string{``, `true`, `"builder"`, `[{"builder": true}]`, `{"builder": true`, `null`} {
		require.False(t, builderflag.On([]byte(notObject)), notObject)
	}
}
