// Package core is the roleset service's engine: it decides which login a job connects as
// (owner's named or default role, or the viewer's roles), makes and retires role-set logins on
// the target cluster in the order that keeps every datatable_role_set row naming a login that
// authenticates, runs the role lifecycle (create, enable, disable, rename, delete), the sweep
// and the reconciler, and keeps the caches that make the warm path free of policy calls and
// database writes. The race and crash windows are spelled out in docs/roleset.md.
package engine
