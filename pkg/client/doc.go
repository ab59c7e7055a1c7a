// Package client is what a worker imports to ask millwright its two run-time questions: which
// Postgres login a job connects to a data table as (roleset's ConnectionService), and whether
// operator builder rights are on in a workspace (policy's SettingsService). It exists so that
// every worker gets the security-relevant details right once, instead of each re-deriving them:
//
//   - Identity. ResolveConnection authenticates with the JOB token as the bearer (roleset takes
//     the run's identity, and so its recorded viewer, from the token, never from a request
//     field), so the client attaches credentials per call: the job token on roleset calls, the
//     worker's own token (Options.Token) on policy calls. Connections are dialled without
//     connection-level credentials, so a call never carries two authorization headers and the
//     worker's token never reaches roleset in place of the job's.
//   - Refusals surface at once. Only transient failures (Unavailable, ResourceExhausted,
//     Aborted with reason CONFLICT_RETRY) are retried, with jittered exponential backoff
//     bounded by attempts and the caller's context. PermissionDenied, InvalidArgument,
//     FailedPrecondition, ... are returned on the first answer, with the ErrorInfo reason
//     available through Reason.
//   - The credential is never logged. Connection prints, formats (every fmt verb), logs
//     (slog.LogValuer) and marshals to JSON without its password; only DSN reveals it.
//   - The builder flag is revocable. BuilderEnabled caches per workspace (TTL at most 60 s, as
//     the spec says) in a revcache.Cache, and a stream.LiveFollower on policy's EventService
//     (kind "settings", from the head) drops an entry as soon as its event is delivered. The
//     cache only answers while the watch stream is live (docs/caching.md); until then, and
//     from the moment a stream breaks or asks for a resync, every entry is dropped and calls
//     read through. A read that raced an invalidation is never stored (generation check), so
//     a "true" can never outlive the delivery of the event that turned it off.
//
// Options.RolesetConn / Options.PolicyConn accept existing connections (tests, the lead's
// integration tests, a process that already dials the services); they must not carry
// connection-level per-RPC credentials, for the reason above.
package client
