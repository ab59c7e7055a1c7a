// Package audit is every service's audit trail: one event per decision that granted or
// refused (docs/audit.md), in the service's own database, chained by hash so that an edited,
// deleted or reordered event is found (Verify), with secrets only as keyed hashes (Hasher).
//
// The trail is written by one step of the gRPC interceptor chain (pkg/server), which knows
// every RPC, so completeness does not depend on each handler remembering: a service lists,
// for each of its RPCs, the class of decision it makes or why it is not audited (Rules), and
// a test (audittest) fails on an RPC in neither list. Handlers add what only they know (the
// login and roles of an issued credential) with Note. Decisions outside RPCs (a proxy
// session's start and end) are recorded with Recorder.Record.
//
// A decision is written before its answer is sent, so a crash never loses one; identical
// decisions repeated within the repeat window are counted in memory and written as one event
// with a count at the window's end (Recorder). Classes that fail closed refuse the call when
// the write fails.
package audit
