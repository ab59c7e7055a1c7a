// Package store holds every SQL statement on the roleset service's own database: clusters, the
// role catalog, data tables and their permissions, the role-set login rows and the retire
// journal, the proxy's run-scoped tickets and cancel keys, and the advisory locks that
// serialize a login's lifecycle across replicas. Statements on a target cluster live in
// package target. Secrets arrive here already encrypted, a ticket's secret as its verifier.
package store
