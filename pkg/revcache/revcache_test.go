package revcache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/revcache"
)

func always() bool { return true }

// loader counts its calls and answers v.
func loader(calls *int, v int) revcache.Loader[int] {
	return func(context.Context) (int, time.Time, error) { *calls++; return v, time.Time{}, nil }
}

// TestFillRacingInvalidationIsDropped: an invalidation that runs while a load is in flight
// wins; the loaded value (which may predate the change) is returned but not cached.
func TestFillRacingInvalidationIsDropped(t *testing.T) {
	for name, invalidate := range map[string]func(c *revcache.Cache[string, int]){
		"same key":    func(c *revcache.Cache[string, int]) { c.Invalidate("k") },
		"another key": func(c *revcache.Cache[string, int]) { c.Invalidate("j") },
		"a match":     func(c *revcache.Cache[string, int]) { c.InvalidateFunc(func(string, int) bool { return false }) },
		"a purge":     func(c *revcache.Cache[string, int]) { c.Purge() },
	} {
		t.Run(name, func(t *testing.T) {
			c := revcache.New[string, int](revcache.Options{TTL: time.Minute, MaxEntries: 10, Live: always})
			loads := 0
			v, err := c.Get(context.Background(), "k", func(context.Context) (int, time.Time, error) {
				loads++
				invalidate(c) // the event arrives mid-load
				return 1, time.Time{}, nil
			})
			require.NoError(t, err)
			require.Equal(t, 1, v)
			require.Zero(t, c.Len())
			_, _ = c.Get(context.Background(), "k", loader(&loads, 2))
			require.Equal(t, 2, loads)
			require.Equal(t, 1, c.Len())
		})
	}
}

func TestNotAfterBoundsTheTTL(t *testing.T) {
	now := time.Unix(0, 0)
	c := revcache.New[string, int](revcache.Options{TTL: time.Minute, MaxEntries: 10, Live: always})
	c.SetClock(func() time.Time { return now })
	calls := 0
	load := func(context.Context) (int, time.Time, error) { calls++; return 1, now.Add(time.Second), nil }
	_, _ = c.Get(context.Background(), "k", load)
	_, _ = c.Get(context.Background(), "k", load)
	require.Equal(t, 1, calls)
	now = now.Add(2 * time.Second)
	_, _ = c.Get(context.Background(), "k", load)
	require.Equal(t, 2, calls, "an entry never outlives its notAfter (a token's expiry)")
	require.False(t, c.Put("past", 1, now.Add(-time.Second), c.Begin()), "an answer already past its bound is not kept")

	now = now.Add(time.Second) // the entry's own bound passed; the TTL alone now
	_, _ = c.Get(context.Background(), "t", loader(&calls, 1))
	now = now.Add(59 * time.Second)
	_, _ = c.Get(context.Background(), "t", loader(&calls, 1))
	require.Equal(t, 3, calls, "served within the TTL")
	now = now.Add(time.Second)
	_, _ = c.Get(context.Background(), "t", loader(&calls, 1))
	require.Equal(t, 4, calls, "reloaded once the TTL passed")
}

// TestLiveness: while the stream is not live an entry filled before is not served (a revoke may
// have been committed unseen) and nothing new is kept; an answer whose load began while not
// live is not kept either, even if the stream became live meanwhile.
func TestLiveness(t *testing.T) {
	live := true
	c := revcache.New[string, int](revcache.Options{TTL: time.Minute, MaxEntries: 10, Live: func() bool { return live }})
	loads := 0
	v, _ := c.Get(context.Background(), "k", loader(&loads, 1))
	require.Equal(t, 1, v)
	live = false
	v, _ = c.Get(context.Background(), "k", loader(&loads, 2))
	require.Equal(t, 2, v, "the stale entry is not served while not live")
	require.Equal(t, 2, loads)
	live = true
	v, _ = c.Get(context.Background(), "k", loader(&loads, 3))
	require.Equal(t, 1, v, "the entry filled while live is served again once live (its follower drops it if it cannot replay)")
	live = false
	_, _ = c.Get(context.Background(), "j", loader(&loads, 4))
	require.Equal(t, 1, c.Len(), "nothing is kept while not live")

	tk := c.Begin()
	live = true
	require.False(t, c.Put("j", 5, time.Time{}, tk), "a load that began while not live is not kept")
	tk = c.Begin()
	live = false
	require.False(t, c.Put("j", 5, time.Time{}, tk), "nor one that ends while not live")
}

// TestNilLiveNeverCaches: no Live function means no stream vouches for the entries: fail
// closed. So does a zero TTL or size.
func TestNilLiveNeverCaches(t *testing.T) {
	for name, o := range map[string]revcache.Options{
		"nil live": {TTL: time.Minute, MaxEntries: 10},
		"zero TTL": {MaxEntries: 10, Live: always},
		"no room":  {TTL: time.Minute, Live: always},
	} {
		t.Run(name, func(t *testing.T) {
			c := revcache.New[string, int](o)
			loads := 0
			for range 3 {
				_, _ = c.Get(context.Background(), "k", loader(&loads, 1))
			}
			require.Equal(t, 3, loads)
			require.Zero(t, c.Len())
		})
	}
}

func TestErrorsAreNotCached(t *testing.T) {
	c := revcache.New[string, int](revcache.Options{TTL: time.Minute, MaxEntries: 10, Live: always})
	boom := errors.New("boom")
	_, err := c.Get(context.Background(), "k", func(context.Context) (int, time.Time, error) { return 1, time.Time{}, boom })
	require.ErrorIs(t, err, boom)
	require.Zero(t, c.Len())
}

func TestBoundAndStats(t *testing.T) {
	c := revcache.New[int, int](revcache.Options{TTL: time.Minute, MaxEntries: 3, Live: always})
	loads := 0
	for k := range 3 {
		_, _ = c.Get(context.Background(), k, loader(&loads, k))
	}
	require.Equal(t, 3, c.Len())
	_, _ = c.Get(context.Background(), 0, loader(&loads, 0))
	hits, misses := c.Stats()
	require.Equal(t, [2]uint64{1, 3}, [2]uint64{hits, misses})
	_, _ = c.Get(context.Background(), 9, loader(&loads, 9))
	require.Equal(t, 1, c.Len(), "full: emptied, then the new entry")
	c.InvalidateFunc(func(k, _ int) bool { return k == 9 })
	require.Zero(t, c.Len())
}
