// Package revcache is the one per-process cache millwright keeps in front of answers that must
// be revocable (a token's identity, the builder flag, a run's viewer, a resolved connection):
// a map with a TTL, a size bound and hit/miss counts, whose entries are dropped by invalidation
// stream events. Its rules, the same for every cache (docs/caching.md):
//
//   - Liveness. Options.Live says whether the caller's invalidation stream is delivering every
//     change now. An entry is served, and a loaded answer is stored, only while it is; a nil
//     Live means never live: nothing is cached (fail closed). Whoever follows the stream drops
//     the cache (Purge) when it cannot replay what it missed (stream.LiveFollower does).
//   - Generation. Every invalidation bumps a counter; an answer is stored only if the cache was
//     live when its load began and no invalidation ran before it is stored, so an answer
//     computed across an event (which may predate it) is returned but never kept.
//   - Bounds. An entry lives at most the TTL, or less when its loader says so (a token's
//     expiry, a set login's freshness); when MaxEntries is reached the map is emptied (rare,
//     and always safe).
//
// Modelled on SpiceDB's pkg/cache and OpenFGA's storage cache; unlike theirs, a miss that
// raced an invalidation is not stored, because here a stale "yes" is a security bug.
package revcache
