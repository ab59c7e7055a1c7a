// Package stream is the invalidation stream every millwright service carries: an ordered outbox
// table filled by triggers in the same transaction as each change, a listener that delivers new
// events to in-process subscribers (cache invalidation) in id order, the server side of the
// Watch RPC for consumers in other processes, and Follow, the client loop those consumers run
// (LiveFollower is Follow for a cache: from the head, live while it delivers, docs/caching.md).
//
// Design. The database is the source of truth and NOTIFY is only a wake-up call: a listener
// that misses a notification (connection lost, server restart, notification queue full)
// catches up by reading "id > last" after every (re)connect and every PollInterval, so a lost
// notification costs a delay, never a stale cache. That read is only gap-free because it stops at
// the safe head: ids become visible in any order, and a reader delivers only up to the highest
// id below which no transaction is still committing (a reader-writer lock: see UpgradeSQL's
// comment). Watch serves a backlog from the table and then switches to the events the
// local listener delivers, subscribing before it reads the backlog so the two phases overlap
// and duplicates are dropped by id. Old rows are pruned after Options.Retention by dropping
// whole time partitions of the outbox (Prune; a quarter of the retention each, so O(1) per
// period); pruning records the highest dropped id in stream_state so a consumer resuming from
// before it is told to resync (ResyncError) rather than silently missing events. Consumers that must not
// lose or repeat an effect (billing's projection) persist the last applied id in the same
// transaction as the effect; Follow resumes from it.
package stream
