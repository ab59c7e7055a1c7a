package revcache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Cache.
type Options struct {
	// TTL bounds every entry; <= 0 caches nothing.
	TTL time.Duration
	// MaxEntries bounds the map (emptied when full); <= 0 caches nothing.
	MaxEntries int
	// Live reports whether the invalidation stream delivers every change now; nil: never.
	Live func() bool
}

// Cache maps K to V under the package's rules. The zero value is not usable; call New.
type Cache[K comparable, V any] struct {
	ttl  time.Duration
	max  int
	live func() bool

	mu      sync.Mutex
	now     func() time.Time
	entries map[K]entry[V]
	gen     uint64 // bumped by every invalidation

	hits, misses atomic.Uint64
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns an empty cache.
func New[K comparable, V any](o Options) *Cache[K, V] {
	live := o.Live
	if live == nil {
		live = func() bool { return false } // fail closed: no stream, no caching
	}
	return &Cache[K, V]{ttl: o.TTL, max: o.MaxEntries, live: live, now: time.Now, entries: map[K]entry[V]{}}
}

// SetClock replaces time.Now (tests).
func (c *Cache[K, V]) SetClock(now func() time.Time) {
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}

// Lookup returns k's entry if the cache is live and the entry has not expired, and counts a
// hit or a miss.
func (c *Cache[K, V]) Lookup(k K) (V, bool) {
	c.mu.Lock()
	e, ok := c.entries[k]
	ok = ok && c.now().Before(e.expires) && c.live()
	c.mu.Unlock()
	if !ok {
		c.misses.Add(1)
		var zero V
		return zero, false
	}
	c.hits.Add(1)
	return e.v, true
}

// Ticket is taken before computing an answer and handed to Put with it.
type Ticket struct {
	gen  uint64
	live bool
}

// Begin returns the ticket of an answer about to be computed.
func (c *Cache[K, V]) Begin() Ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Ticket{gen: c.gen, live: c.live()}
}

// Put stores v for k, until the TTL or notAfter (zero: no bound of its own) whichever comes
// first, if the cache was live at t and still is, and no invalidation ran since t. It reports
// whether v was stored.
func (c *Cache[K, V]) Put(k K, v V, notAfter time.Time, t Ticket) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ttl <= 0 || c.max <= 0 || !t.live || t.gen != c.gen || !c.live() {
		return false
	}
	exp := c.now().Add(c.ttl)
	if !notAfter.IsZero() && notAfter.Before(exp) {
		exp = notAfter
	}
	if !exp.After(c.now()) {
		return false
	}
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
	c.entries[k] = entry[V]{v: v, expires: exp}
	return true
}

// Loader computes an answer and the latest time it may be cached until (zero: the TTL only).
type Loader[V any] func(ctx context.Context) (v V, notAfter time.Time, err error)

// Get returns k's entry, or loads it and stores it under Put's conditions. Errors are never
// stored.
func (c *Cache[K, V]) Get(ctx context.Context, k K, load Loader[V]) (V, error) {
	if v, ok := c.Lookup(k); ok {
		return v, nil
	}
	t := c.Begin()
	v, notAfter, err := load(ctx)
	if err == nil {
		c.Put(k, v, notAfter, t)
	}
	return v, err
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

// Stats returns how many lookups hit and missed (server.CacheCollectors).
func (c *Cache[K, V]) Stats() (hits, misses uint64) { return c.hits.Load(), c.misses.Load() }

// Len returns the number of entries, expired ones included (tests, metrics).
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
