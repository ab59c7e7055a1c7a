package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Cache holds the answers that make the warm path free of policy calls and database writes:
// run identities by job-token hash, tenancies by (workspace, email), and resolved connections
// by (job-token hash, canonical reference).
//
// Invalidation is by event, not by time: policy's Watch (member, group, folder, run, token...)
// and this service's own stream (role, datatable, login, cluster) drop entries. An entry is
// stored only if no invalidation happened while it was computed (the generation did not move)
// and only while both streams are live, so an answer computed from data older than an event
// already received is never cached. The TTL only bounds the damage of a stream that stalls
// without failing.
type Cache struct {
	mu        sync.Mutex
	gen       uint64
	ttl       time.Duration
	maxSize   int
	runs      map[string]runEntry
	tenancies map[[2]string]tenancyEntry
	conns     map[string]*connEntry
	live      func() bool
	now       func() time.Time

	connHits, connMisses atomic.Uint64
}

// ConnStats returns how many connection lookups (the warm path) hit and missed (metrics).
func (c *Cache) ConnStats() (hits, misses uint64) { return c.connHits.Load(), c.connMisses.Load() }

type runEntry struct {
	run Run
	exp time.Time
}

type tenancyEntry struct {
	id  tenancy.Identity
	exp time.Time
}

type connEntry struct {
	conn      Connection
	workspace string
	exp       time.Time
}

// NewCache returns an empty cache. live reports whether the invalidation streams are
// connected; nil means never (no caching).
func NewCache(ttl time.Duration, maxSize int, live func() bool) *Cache {
	if live == nil {
		live = func() bool { return false }
	}
	return &Cache{ttl: ttl, maxSize: maxSize, live: live, now: time.Now,
		runs: map[string]runEntry{}, tenancies: map[[2]string]tenancyEntry{}, conns: map[string]*connEntry{}}
}

// Gen returns the current generation, read before computing an answer.
func (c *Cache) Gen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *Cache) storable(gen uint64) bool {
	return c.ttl > 0 && c.gen == gen && c.live()
}

func (c *Cache) room() {
	if len(c.conns)+len(c.runs)+len(c.tenancies) >= c.maxSize {
		c.conns = map[string]*connEntry{}
		c.runs = map[string]runEntry{}
		c.tenancies = map[[2]string]tenancyEntry{}
	}
}

// Run returns a cached run identity.
func (c *Cache) Run(tokenHash string) (Run, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.runs[tokenHash]
	if !ok || c.now().After(e.exp) || !c.live() {
		return Run{}, false
	}
	return e.run, true
}

// PutRun stores a run identity computed at generation gen.
func (c *Cache) PutRun(tokenHash string, r Run, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storable(gen) {
		c.room()
		c.runs[tokenHash] = runEntry{run: r, exp: c.now().Add(c.ttl)}
	}
}

// Tenancy returns a cached tenancy.
func (c *Cache) Tenancy(workspace, email string) (tenancy.Identity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.tenancies[[2]string{workspace, email}]
	if !ok || c.now().After(e.exp) || !c.live() {
		return tenancy.Identity{}, false
	}
	return e.id, true
}

// PutTenancy stores a tenancy computed at generation gen.
func (c *Cache) PutTenancy(workspace, email string, id tenancy.Identity, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storable(gen) {
		c.room()
		c.tenancies[[2]string{workspace, email}] = tenancyEntry{id: id, exp: c.now().Add(c.ttl)}
	}
}

// Conn returns a cached connection.
func (c *Cache) Conn(key string) (Connection, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.conns[key]
	if !ok || c.now().After(e.exp) || !c.live() {
		c.connMisses.Add(1)
		return Connection{}, false
	}
	c.connHits.Add(1)
	return e.conn, true
}

// PutConn stores a connection computed at generation gen, for the TTL or until the
// connection's freshUntil, whichever comes first.
func (c *Cache) PutConn(key, workspace string, conn Connection, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storable(gen) {
		c.room()
		exp := c.now().Add(c.ttl)
		if !conn.freshUntil.IsZero() && conn.freshUntil.Before(exp) {
			exp = conn.freshUntil
		}
		c.conns[key] = &connEntry{conn: conn, workspace: workspace, exp: exp}
	}
}

// DropWorkspace drops the tenancies and connections of a workspace (a member, group or
// folder changed there).
func (c *Cache) DropWorkspace(ws string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k := range c.tenancies {
		if k[0] == ws {
			delete(c.tenancies, k)
		}
	}
	for k, e := range c.conns {
		if e.workspace == ws {
			delete(c.conns, k)
		}
	}
}

// DropRuns drops every run identity and the connections of a workspace (a run ended or a
// token was revoked there; "" for every workspace).
func (c *Cache) DropRuns(ws string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.runs = map[string]runEntry{}
	for k, e := range c.conns {
		if ws == "" || e.workspace == ws {
			delete(c.conns, k)
		}
	}
}

// DropConns drops every cached connection (a role, data table, cluster or login changed).
func (c *Cache) DropConns() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.conns = map[string]*connEntry{}
}

// DropAll drops everything (a stream reconnected or asked for a resync).
func (c *Cache) DropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.conns = map[string]*connEntry{}
	c.runs = map[string]runEntry{}
	c.tenancies = map[[2]string]tenancyEntry{}
}

// OnPolicyEvent applies one of policy's stream events.
func (c *Cache) OnPolicyEvent(kind, workspace string) {
	switch kind {
	case "member", "group", "folder":
		c.DropWorkspace(workspace)
	case "run", "token":
		c.DropRuns(workspace)
	case "catalog", "tag", "settings":
		// Nothing roleset caches depends on these.
	default:
		c.DropAll() // an unknown kind: assume the worst
	}
}
