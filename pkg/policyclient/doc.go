// Package policyclient is what other millwright services use to call policy: Authenticator, a
// remote auth.Authenticator that resolves bearer tokens through policy's TokenService and
// keeps a per-process revcache.Cache that policy's stream (EventService.Watch, followed by a
// stream.LiveFollower) invalidates on token, member and run events. An answer is cached only
// while the watch stream is live (docs/caching.md), so a revoke reaches every client within
// the stream's latency; the TTL is only the bound of a stream that stalls unnoticed.
// Invalidate is the one rule mapping those events to identities, shared with policy's own
// authenticator.
package policyclient
