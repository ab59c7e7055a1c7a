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

// TestNotLivePassesTheCacheBy: while the caller's stream is not live, an entry filled before
// is not served (a revoke may have been committed unseen) and nothing new is kept.
func TestNotLivePassesTheCacheBy(t *testing.T) {
	c := cache.New[string, int](time.Minute, 10)
	loads := 0
	load := func(v int) cache.Loader[int] {
		return func(context.Context) (int, time.Time, error) { loads++; return v, time.Time{}, nil }
	}
	v, _ := c.Get(context.Background(), "k", true, load(1))
	require.Equal(t, 1, v)
	v, _ = c.Get(context.Background(), "k", false, load(2))
	require.Equal(t, 2, v, "the stale entry is not served while not live")
	require.Equal(t, 2, loads)
	v, _ = c.Get(context.Background(), "k", true, load(3))
	require.Equal(t, 1, v, "the entry filled while live is served again once live (events since were applied)")
	_, _ = c.Get(context.Background(), "j", false, load(4))
	require.Equal(t, 1, c.Len(), "nothing is kept while not live")
}
