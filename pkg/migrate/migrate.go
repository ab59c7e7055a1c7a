package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/stream"
)

// streamVersion is the version the stream schema is registered under.
const streamVersion = 1

func provider(db *sql.DB, fsys fs.FS) (*goose.Provider, error) {
	base := goose.NewGoMigration(streamVersion,
		&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, stream.SchemaSQL)
			return err
		}}, nil)
	return goose.NewProvider(database.DialectPostgres, db, fsys,
		goose.WithGoMigrations(base),
		goose.WithDisableGlobalRegistry(true))
}

func open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: parse database url: %w", err)
	}
	return stdlib.OpenDB(*cfg), nil
}

// Up applies every pending migration, then the stream's idempotent upgrade step
// (stream.UpgradeSQL: later versions of the stream schema, which every database gets the
// first time a new binary migrates it, whatever its service's version), then the audit
// trail's idempotent schema (audit.SchemaSQL, the same in every service's database), and
// returns the version reached.
func Up(ctx context.Context, dsn string, fsys fs.FS) (int64, error) {
	db, err := open(dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	p, err := provider(db, fsys)
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if err := upgradeStream(ctx, db); err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, audit.SchemaSQL); err != nil {
		return 0, fmt.Errorf("migrate: audit schema: %w", err)
	}
	return p.GetDBVersion(ctx)
}

// UpTo applies the pending migrations up to and including version: for tests of an upgrade
// from an older schema with rows in it.
func UpTo(ctx context.Context, dsn string, fsys fs.FS, version int64) error {
	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := provider(db, fsys)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

func upgradeStream(ctx context.Context, db *sql.DB) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("migrate: driver connection is a %T, not pgx's", dc)
		}
		return stream.Upgrade(ctx, sc.Conn())
	})
}

// Expected is the version the embedded migrations reach: what `serve` waits for before it
// reports SERVING. It reads the numbered file names, the same rule goose applies.
func Expected(fsys fs.FS) (int64, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return 0, err
	}
	v := int64(streamVersion)
	for _, f := range files {
		n, err := goose.NumericComponent(f)
		if err != nil {
			return 0, fmt.Errorf("migrate: %s: %w", f, err)
		}
		v = max(v, n)
	}
	return v, nil
}

// Querier is the part of a pgx pool or connection Current needs.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// VersionCheck is pkg/server's Options.SchemaVersion for a service whose readiness is only
// its schema: the version q's database is at, against expected.
func VersionCheck(q Querier, expected int64) func(context.Context) (int64, int64, error) {
	return func(ctx context.Context) (int64, int64, error) {
		cur, err := Current(ctx, q)
		return cur, expected, err
	}
}

// Current reads the version the database is at: 0 when it was never migrated.
func Current(ctx context.Context, q Querier) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		return 0, nil
	}
	return v, err
}
