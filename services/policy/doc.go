// Package policy is the policy service: the workspace authorization model (members, groups,
// folders, the runnable catalog, worker tags, operator settings), bearer tokens, and the
// recorded identity of every run, served over gRPC to the platform and to the other millwright
// services. Its caches (builder flag, tokens) are per process and invalidated by the service's
// own stream, so a revoke reaches every replica within milliseconds, not the 60 s TTL.
//
// Layout: internal/rulebook holds the pure rules; internal/store all SQL (the catalog read rule
// is row-level security, one policy); internal/settings the one path that changes operator
// settings and the builder cache; internal/authn token authentication; internal/api the thin
// handlers and the authorization table (authz.go); internal/retention the maintenance loop
// that drops old runs and tokens; internal/app the wiring; cmd/policy the binary. The design, authorization table, staleness windows and event kinds are in
// docs/policy.md.
package policy
