package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/cache"
)

// TestFillRacingInvalidationIsDropped: an invalidation that runs while a load is in flight
// wins; the loaded value (which may predate the change) is returned but not cached.
func TestFillRacingInvalidationIsDropped(t *testing.T) {
	c := cache.New[string, int](time.Minute, 10)
	loads := 0
	v, err := c.Get(context.Background(), "k", true, func(context.Context) (int, time.Time, error) {
		loads++
		c.Invalidate("k") // the event arrives mid-load
		return 1, time.Time{}, nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, v)
	require.Zero(t, c.Len())
	_, _ = c.Get(context.Background(), "k", true, func(context.Context) (int, time.Time, error) { loads++; return 2, time.Time{}, nil })
	require.Equal(t, 2, loads)
	require.Equal(t, 1, c.Len())
}

func TestNotAfterBoundsTheTTL(t *testing.T) {
	now := time.Unix(0, 0)
	c := cache.New[string, int](time.Minute, 10)
	c.SetClock(func() time.Time { return now })
	load := func(context.Context) (int, time.Time, error) { return 1, now.Add(time.Second), nil }
	_, _ = c.Get(context.Background(), "k", true, load)
	now = now.Add(2 * time.Second)
	calls := 0
	_, _ = c.Get(context.Background(), "k", true, func(ctx context.Context) (int, time.Time, error) { calls++; return load(ctx) })
	require.Equal(t, 1, calls, "an entry never outlives its notAfter (a token's expiry)")
}
