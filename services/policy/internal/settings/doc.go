// Package settings is the one path by which operator settings change (Update: seat check
// first, then the store's merge) and the per-process builder-rights cache (60 s TTL) whose
// entries the stream subscriber drops when a "settings" event arrives: the spec's "keep both
// ends" for cross-replica revocation. It holds the seat checker (billing), and hands the same
// check to member writes (MemberCheck), so every change that may add seats is priced alike.
package settings
