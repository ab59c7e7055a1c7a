// Package pgtest gives integration tests a real, throw-away PostgreSQL: one cluster per test
// binary (started lazily under a temp dir, password auth enforced, durability turned off for
// speed), or the server named by TEST_DATABASE_URL when set, and a fresh database per test
// cloned from a template that is migrated once per binary, because CREATE DATABASE ... TEMPLATE
// is much cheaper than re-running migrations and real Postgres catches what mocks cannot. Call
// Main from TestMain so the cluster is stopped at the end; a watchdog process removes it even if
// the test binary panics or is killed. Pool opens a pool on such a database for one test, and
// Statements records what a pool sends, for tests that bound a path's round trips.
package pgtest
