// Package servicetest is the one way a service's tests run the real policy beside them
// (StartPolicy: build, migrate a fresh database, serve, wait for SERVING, stop at cleanup; its
// packages are internal to its module, so other services run it as a process, as in
// production), the accounts they test tokens with (Accounts: a workspace, user tokens, a job
// token, the token table and the revocation subtests every service must pass), and small
// helpers: free loopback addresses, bearer metadata, a sample read from /metrics, job ids, and
// every handler of a service called directly (Handlers) for the authorization tests, a Watch
// answer (WatchAnswer), a call's error alone (Err), a log buffer safe while servers log
// (LogBuffer), and for the audit trail's tests a trail whose writes fail (BreakAudit) and every
// event a filter selects, across pages (AuditEvents).
package servicetest
