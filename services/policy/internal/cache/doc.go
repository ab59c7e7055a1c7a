// Package cache is the per-process cache the policy service and its clients keep in front of
// decisions that must be revocable: a TTL map whose entries are also dropped by stream events.
// A fill that raced with an invalidation is discarded (a generation counter), so an event
// applied while a load was in flight can never be overwritten by the stale value it replaced.
package cache
