// Package rolename decides which names a data-table catalog role may have, and quotes names
// and literals for the role DDL the store sends. Names are interpolated into SQL (CREATE ROLE,
// GRANT, ALTER ROLE cannot take bind parameters), into `-- role <name>` annotations and into
// `?role=` references, so the rule is a whitelist ([A-Za-z0-9_-], 1-63 bytes) rather than an
// escaping scheme, and every name the service itself needs (admin, the wm_set_ set logins,
// the viewer sentinel, Postgres' and Windmill's own roles) is reserved so that no catalog role
// can impersonate it.
package rolename
