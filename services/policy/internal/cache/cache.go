package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Cache maps K to V for at most TTL. The zero value is not usable; call New.
type Cache[K comparable, V any] struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu      sync.Mutex
	entries map[K]entry[V]
	gen     uint64 // bumped by every invalidation; a fill started under an older gen is dropped

	hits, misses atomic.Uint64
}

// Stats returns how many lookups were answered from an entry and how many loaded (metrics).
func (c *Cache[K, V]) Stats() (hits, misses uint64) { return c.hits.Load(), c.misses.Load() }

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache whose entries live at most ttl, holding at most max entries (when full,
// it is emptied: rare, and always safe).
func New[K comparable, V any](ttl time.Duration, max int) *Cache[K, V] {
	return &Cache[K, V]{ttl: ttl, max: max, now: time.Now, entries: map[K]entry[V]{}}
}

// SetClock replaces time.Now (tests).
func (c *Cache[K, V]) SetClock(now func() time.Time) {
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}

// Loader loads a value and the latest time it may be cached until (zero: no bound beyond the
// TTL), e.g. a token's expiry.
type Loader[V any] func(ctx context.Context) (v V, notAfter time.Time, err error)

// Get returns the cached value of k, or loads it. Errors are not cached. When live is false
// the cache is passed by both ways: no entry is served and the loaded value is not kept. The
// caller cannot vouch that it has seen every invalidation (its stream is not connected, or
// has not caught up since it reconnected), so an entry may predate a revoke.
func (c *Cache[K, V]) Get(ctx context.Context, k K, live bool, load Loader[V]) (V, error) {
	store := live
	c.mu.Lock()
	if e, ok := c.entries[k]; ok && live && c.now().Before(e.expires) {
		c.mu.Unlock()
		c.hits.Add(1)
		return e.v, nil
	}
	c.misses.Add(1)
	gen := c.gen
	c.mu.Unlock()

	v, notAfter, err := load(ctx)
	if err != nil || !store {
		return v, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return v, nil // an invalidation ran during the load: the value may predate it
	}
	exp := c.now().Add(c.ttl)
	if !notAfter.IsZero() && notAfter.Before(exp) {
		exp = notAfter
	}
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
	c.entries[k] = entry[V]{v: v, expires: exp}
	return v, nil
}

// Invalidate drops k.
func (c *Cache[K, V]) Invalidate(k K) {
	c.mu.Lock()
	c.gen++
	delete(c.entries, k)
	c.mu.Unlock()
}

// InvalidateFunc drops every entry for which match returns true.
func (c *Cache[K, V]) InvalidateFunc(match func(K, V) bool) {
	c.mu.Lock()
	c.gen++
	for k, e := range c.entries {
		if match(k, e.v) {
			delete(c.entries, k)
		}
	}
	c.mu.Unlock()
}

// Purge drops everything.
func (c *Cache[K, V]) Purge() {
	c.mu.Lock()
	c.gen++
	clear(c.entries)
	c.mu.Unlock()
}

// Len returns the number of entries (tests).
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
