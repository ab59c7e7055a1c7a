package billingtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/billing/migrations"
)

// NewDB returns the DSN of a fresh, migrated billing database.
func NewDB(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabase(t, "billing", pgtest.Migrations(migrations.FS))
}

// Pool opens a pool on dsn, closed at cleanup.
func Pool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 8
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}
