package reqctx_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/millwright/millwright/pkg/server/reqctx"
)

func TestCallIsSharedWithOuterLayers(t *testing.T) {
	outer, call := reqctx.Start(context.Background())
	inner := reqctx.WithRequestID(outer, "r1")
	reqctx.Annotate(inner, slog.String("k", "v"))
	// The outer layer, holding only its own context, sees what the inner one recorded.
	assert.Equal(t, "r1", call.RequestID())
	assert.Equal(t, "r1", reqctx.RequestID(outer))
	assert.Equal(t, []slog.Attr{slog.String("k", "v")}, call.Attrs())
}

func TestOutsideACall(t *testing.T) {
	ctx := context.Background()
	assert.Empty(t, reqctx.RequestID(ctx))
	reqctx.Annotate(ctx, slog.String("k", "v")) // no-op, no panic
	assert.Nil(t, reqctx.FromContext(ctx).Attrs())
	assert.Equal(t, "r2", reqctx.RequestID(reqctx.WithRequestID(ctx, "r2")))
	assert.Same(t, slog.Default(), reqctx.Logger(ctx))
}

func TestIDs(t *testing.T) {
	id := reqctx.NewID()
	assert.Len(t, id, 32)
	assert.True(t, reqctx.ValidID(id))
	assert.NotEqual(t, id, reqctx.NewID())
	for _, bad := range []string{"", "a b", "a\nb", `a"b`, strings.Repeat("a", 129)} {
		assert.False(t, reqctx.ValidID(bad), bad)
	}
}
