// Package audittest holds the audit trail's checks that every service's tests run: that each
// RPC it serves is either recorded or left out with a reason (Complete), and that every field
// that looks like a secret is marked debug_redact, so the trail records only its keyed hash
// (Redacted).
package audittest
