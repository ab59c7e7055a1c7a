// Package testdb gives the policy service's tests a freshly migrated database: pgtest's
// template (migrated once per test binary with the service's real migrations) cloned per test.
package testdb

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/policy/migrations"
)

// Migrate applies the policy migrations to dsn.
var Migrate = pgtest.Migrations(migrations.FS)

// DSN returns the DSN of a new migrated database for t.
func DSN(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabase(t, "policy", Migrate)
}

// Pool returns a pool on a new migrated database, closed at the end of t.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.Pool(t, DSN(t))
}
