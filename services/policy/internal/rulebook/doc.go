// Package rulebook holds the policy service's pure rules: what a well-formed workspace, member,
// group, folder, principal, path, script hash, tag and scope look like; how folder grants
// become a member's tenancy; how operator settings resolve and merge; which tags a member may
// use; how a run's origin decides where its viewer comes from; and the result-cache key. It
// imports neither gRPC nor pgx, so every rule is testable as plain data; the read rule of the
// catalog is the one exception, kept in SQL as row-level security (see the store) so that
// "readable by this caller" has a single implementation.
package rulebook
