// Package ticket is a run-scoped credential: what ResolveConnection hands a job, in proxy mode,
// instead of a login's long-lived password, and what the job presents to roleset's PostgreSQL
// proxy (user = the ticket id, password = the secret). A ticket is bound to one run (workspace
// and job id), one data table and one decision (the login and its roles), and it authenticates
// only until it expires or is revoked, so the reach it gives ends with the run or with the
// decision. Only the secret's SCRAM-SHA-256 verifier is stored: the proxy checks a client's
// SCRAM proof against it, the secret never crosses the wire, and a stolen row logs no one in.
// Ids and secrets are random, so they name no one if logged and no ticket tells anything about
// another. Pure rules: no SQL (package store keeps tickets), no gRPC.
package ticket
