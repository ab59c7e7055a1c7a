// Package target holds every statement the service runs on a target cluster: creating,
// enabling, renaming and dropping catalog roles, and creating, taking back and retiring
// role-set logins. Each mutation is one round trip of one implicit transaction (a multi-statement
// simple query), that checks its own result (memberships, CONNECT) before it commits, so a
// crash or a cut connection leaves either nothing or the whole change. Identifiers are quoted
// names that rolename.Validate accepted, or set-login names this service built; passwords only
// ever travel as client-built SCRAM verifiers.
package target
