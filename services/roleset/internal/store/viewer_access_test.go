package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/migrate"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Migration 00004 on a database at version 3: the data tables registered before it keep
// ?as=viewer (viewer_access on, so nothing that works stops working); a data table registered
// after it is off until an administrator opts in, and an upsert that does not say keeps what is
// stored.
func TestViewerAccessMigration(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t, "roleset-v3", func(ctx context.Context, dsn string) error {
		return migrate.UpTo(ctx, dsn, migrations.FS, 3)
	})
	pool := pgtest.Pool(t, dsn)
	_, err := pool.Exec(ctx, `INSERT INTO cluster (id, host, port, maintenance_db, admin_user, admin_password_enc)
		VALUES ('c', 'h', 5432, 'postgres', 'admin', '\x00')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO datatable (workspace, name, cluster_id, database, admin_user, admin_password_enc, default_role)
		VALUES ('ws', 'old', 'c', 'db', 'owner', '\x00', '$none')`)
	require.NoError(t, err)

	_, err = migrate.Up(ctx, dsn, migrations.FS)
	require.NoError(t, err)
	s := store.New(pool)

	old, err := s.GetDatatable(ctx, "ws", "old")
	require.NoError(t, err)
	require.True(t, old.ViewerAccess, "a data table registered before the migration keeps ?as=viewer")

	on, off := true, false
	spec := store.Datatable{Workspace: "ws", Name: "new", ClusterID: "c", Database: "db", AdminUser: "owner",
		AdminPasswordEnc: []byte{0}, DefaultRole: "$none"}
	got, err := s.UpsertDatatable(ctx, spec, nil)
	require.NoError(t, err)
	require.False(t, got.ViewerAccess, "a new data table is off unless it opts in")
	got, err = s.UpsertDatatable(ctx, spec, &on)
	require.NoError(t, err)
	require.True(t, got.ViewerAccess)
	got, err = s.UpsertDatatable(ctx, spec, nil)
	require.NoError(t, err)
	require.True(t, got.ViewerAccess, "an upsert that does not say keeps the stored opt-in")
	got, err = s.UpsertDatatable(ctx, spec, &off)
	require.NoError(t, err)
	require.False(t, got.ViewerAccess)
	stored, err := s.GetDatatable(ctx, "ws", "new")
	require.NoError(t, err)
	require.False(t, stored.ViewerAccess)

	spec.Name = "old"
	got, err = s.UpsertDatatable(ctx, spec, nil)
	require.NoError(t, err)
	require.True(t, got.ViewerAccess, "re-registering an old data table without the field keeps it on")
}
