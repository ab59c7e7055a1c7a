package engine

import (
	"time"

	"github.com/millwright/millwright/pkg/revcache"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Cache holds the answers that make the warm path free of policy calls and database writes:
// run identities by job-token hash, tenancies by (workspace, email), and resolved connections
// by (job-token hash, canonical reference). Each is a revcache.Cache under its rules
// (docs/caching.md): served and stored only while both invalidation streams are live (policy's
// Watch: member, group, folder, run, token...; this service's own: role, datatable, login,
// cluster), and an answer computed across an invalidation of its map is not stored. Every event
// that can change a connection invalidates the connection map, so a connection computed across
// any relevant event is never kept. The TTL only bounds the damage of a stream that stalls
// without failing; a set login's entry is further bounded by its freshUntil.
type Cache struct {
	runs      *revcache.Cache[string, Run]
	tenancies *revcache.Cache[[2]string, tenancy.Identity]
	conns     *revcache.Cache[string, connEntry]
}

type connEntry struct {
	conn      Connection
	workspace string
}

// NewCache returns an empty cache whose maps each hold at most maxEntries for at most ttl.
// live reports whether the invalidation streams are connected; nil means never (no caching).
func NewCache(ttl time.Duration, maxEntries int, live func() bool) *Cache {
	o := revcache.Options{TTL: ttl, MaxEntries: maxEntries, Live: live}
	return &Cache{runs: revcache.New[string, Run](o), tenancies: revcache.New[[2]string, tenancy.Identity](o),
		conns: revcache.New[string, connEntry](o)}
}

// putConn stores a connection computed under ticket t, for the TTL or until the connection's
// freshUntil (a set login: past it the row is no longer known to be far from a sweep's
// cutoff), whichever comes first.
func (c *Cache) putConn(key, workspace string, conn Connection, t revcache.Ticket) bool {
	return c.conns.Put(key, connEntry{conn: conn, workspace: workspace}, conn.freshUntil, t)
}

// dropWorkspace drops the tenancies and connections of a workspace (a member, group or folder
// changed there).
func (c *Cache) dropWorkspace(ws string) {
	c.tenancies.InvalidateFunc(func(k [2]string, _ tenancy.Identity) bool { return k[0] == ws })
	c.dropConnsOf(ws)
}

// dropRuns drops every run identity and the connections of a workspace (a run ended or a token
// was revoked there; "" for every workspace).
func (c *Cache) dropRuns(ws string) {
	c.runs.Purge()
	c.dropConnsOf(ws)
}

func (c *Cache) dropConnsOf(ws string) {
	c.conns.InvalidateFunc(func(_ string, e connEntry) bool { return ws == "" || e.workspace == ws })
}

// dropAll drops everything (a stream reconnected or asked for a resync).
func (c *Cache) dropAll() {
	c.conns.Purge()
	c.runs.Purge()
	c.tenancies.Purge()
}

// onPolicyEvent applies one of policy's stream events.
func (c *Cache) onPolicyEvent(kind, workspace string) {
	switch kind {
	case "member", "group", "folder":
		c.dropWorkspace(workspace)
	case "run", "token":
		c.dropRuns(workspace)
	case "catalog", "tag", "settings":
		// Nothing roleset caches depends on these.
	default:
		c.dropAll() // an unknown kind: assume the worst
	}
}

// OnPolicyEvent drops what one of policy's stream events may have changed.
func (e *Engine) OnPolicyEvent(kind, workspace string) {
	e.cache.onPolicyEvent(kind, workspace)
	switch kind {
	case "catalog", "tag", "settings":
		// No decision depends on these (onPolicyEvent).
	case "member", "group", "folder", "run", "token":
		e.signalChanged(workspace)
	default:
		e.signalChanged("")
	}
}

// DropConnections drops every cached connection (a role, data table, cluster or login changed,
// here or on another replica).
func (e *Engine) DropConnections() {
	e.cache.conns.Purge()
	e.signalChanged("")
}

// DropCaches drops everything cached (a stream broke, reconnected or asked for a resync).
func (e *Engine) DropCaches() {
	e.cache.dropAll()
	e.signalChanged("")
}

// signalChanged records that decisions of a workspace ("" for every workspace) may have
// changed, and wakes the reader of Changed.
func (e *Engine) signalChanged(workspace string) {
	e.changedMu.Lock()
	if e.changedIn == nil {
		e.changedIn = map[string]bool{}
	}
	e.changedIn[workspace] = true
	e.changedMu.Unlock()
	select {
	case e.changed <- struct{}{}:
	default: // one pending signal covers any number of changes
	}
}

// Changed is signalled after any drop of cached decisions: a decision taken before it may no
// longer hold. TakeChanged says where.
func (e *Engine) Changed() <-chan struct{} { return e.changed }

// TakeChanged returns and forgets the workspaces whose decisions may have changed since the
// last call; all is true when any change concerned every workspace (a role, a data table, a
// cluster, a stream reconnecting).
func (e *Engine) TakeChanged() (all bool, workspaces map[string]bool) {
	e.changedMu.Lock()
	defer e.changedMu.Unlock()
	workspaces, e.changedIn = e.changedIn, nil
	return workspaces[""], workspaces
}

// ConnectionCacheStats returns how many connection lookups (the warm path) hit and missed.
func (e *Engine) ConnectionCacheStats() (hits, misses uint64) { return e.cache.conns.Stats() }
