// Package roleset is the roleset service: it decides which Postgres login a job connects to a
// data table as, and keeps the target clusters' roles and role-set logins (wm_set_<hash>) in
// the state that decision needs.
//
// Layout: internal/engine is the engine (decisions, set-login ensure/retire, role lifecycle,
// sweep, reconcile, caches); internal/store is every statement on the service database;
// internal/target every statement on a target cluster; internal/policyidentity the policy client and
// its stream follower; internal/api the thin gRPC handlers; internal/{datatableref,rolename,tenancy}
// the pure rules (reference parser, role names, tenant matching and set-login naming);
// internal/secret encryption at rest and SCRAM verifiers.
//
// The invariant everything is ordered around: a datatable_role_set row always names a login
// that authenticates with the password the row holds. The row is written after the login's
// CREATE/ALTER committed (in a service-DB transaction holding the login's advisory lock from
// before the cluster was looked at, so racing replicas wait and then read the winner's row),
// and removed in its own commit, together with a retire-journal entry, before the login is made
// NOLOGIN, its sessions ended and it is dropped. Every crash window and race is spelled out in
// docs/roleset.md.
package roleset
