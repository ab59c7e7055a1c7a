// Package target holds every statement the service runs on a target cluster: creating,
// enabling, renaming and dropping catalog roles, and creating, taking back and retiring
// role-set logins. Each mutation is one transaction that checks its own result before it
// commits, so a crash or a cut connection leaves either nothing or the whole change; creating
// or taking back a role (ensureRole) is the one that needs several round trips, because the
// ownership proof written as the role's comment binds the oid the CREATE assigns. A role found
// on the cluster is reused only if that proof verifies, and only after everything another
// CREATEROLE holder could have planted on it is reset and checked. Identifiers are quoted
// names that rolename.Validate accepted, or set-login names this service built; passwords only
// ever travel as client-built SCRAM verifiers.
package target
