// Package policyclient is what other millwright services use to call policy: Authenticator, a
// remote auth.Authenticator that resolves bearer tokens through policy's TokenService and
// keeps a per-process cache that the policy stream (EventService.Watch) invalidates on token,
// member and run events. An answer is cached only when the watcher is known to deliver every
// event after the database snapshot the answer was read in (AuthenticateResponse carries that
// stream position), so a revoke reaches every client within the stream's latency; the TTL is
// only the bound while policy is unreachable.
package policyclient
