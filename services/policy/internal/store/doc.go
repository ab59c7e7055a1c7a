// Package store holds all of the policy service's SQL: workspaces, members, groups, folders,
// the runnable catalog, worker tags, tokens, runs and operator settings. Nothing else touches
// these tables. Catalog reads go through one function, asCaller, which resolves the caller's
// tenancy, sets it on the transaction and switches to a role subject to row-level security, so
// "readable by this caller" is the database's single policy, checked for a whole list of paths
// in one query. Writes that guard an invariant (the last enabled admin) serialize on the
// workspace row; writes that may add seats (builder on, member writes) are priced by billing
// inside their transaction under one advisory lock (checkSeats, seats.go); every change
// reaches the invalidation stream through table triggers. Runs and job tokens live in weekly
// partitions that Maintain (retention.go) creates ahead and drops once past the retention, so
// removing them never deletes row by row (docs/policy.md, "Retention").
package store
