package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
	"github.com/millwright/millwright/services/policy/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture builds the workspace of the readability table:
//
//	admin (admin), owner, freader (folder reader), fwriter (folder writer, via group),
//	fowner (folder owner), grouped (member of group "analysts", which has an extra perm),
//	direct (a direct extra perm), stranger (member, no grant), disabled (disabled member that
//	would otherwise be a folder reader).
func fixture(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	s, _ := storeWithW(t)
	newWorkspace(t, s, "other", "Other")
	addMembers(t, s,
		store.Member{Username: "owner", Role: rulebook.RoleDeveloper},
		store.Member{Username: "freader", Role: rulebook.RoleOperator},
		store.Member{Username: "fwriter", Role: rulebook.RoleDeveloper},
		store.Member{Username: "fowner", Role: rulebook.RoleDeveloper},
		store.Member{Username: "grouped", Role: rulebook.RoleOperator},
		store.Member{Username: "direct", Role: rulebook.RoleOperator},
		store.Member{Username: "stranger", Role: rulebook.RoleDeveloper},
		store.Member{Username: "disabled", Role: rulebook.RoleOperator, Disabled: true},
	)
	_, err := s.UpsertGroup(ctx, "w", "writers", []string{"fwriter"})
	require.NoError(t, err)
	_, err = s.UpsertGroup(ctx, "w", "analysts", []string{"grouped", "disabled"})
	require.NoError(t, err)
	_, err = s.UpsertFolder(ctx, "w", rulebook.FolderGrants{Name: "fin", Owners: []string{"u/fowner"},
		Readers: []string{"u/freader", "u/disabled"}, Writers: []string{"g/writers"}})
	require.NoError(t, err)
	reg := func(r store.Runnable) {
		r.Workspace = "w"
		require.NoError(t, s.RegisterRunnable(ctx, r))
	}
	reg(store.Runnable{Kind: rulebook.KindScript, Path: "u/owner/s", LatestHash: "00000000000000a1", Versions: []string{"00000000000000a0", "00000000000000a1"}})
	reg(store.Runnable{Kind: rulebook.KindFlow, Path: "f/fin/report"})
	reg(store.Runnable{Kind: rulebook.KindApp, Path: "u/owner/shared", ExtraPerms: map[string]bool{"g/analysts": false, "u/direct": true}})
	reg(store.Runnable{Kind: rulebook.KindScript, Path: "f/other/x", LatestHash: "00000000000000b1", Versions: []string{"00000000000000b1"}})
	// Same path in another workspace: never visible from w.
	require.NoError(t, s.RegisterRunnable(ctx, store.Runnable{Workspace: "other", Kind: rulebook.KindFlow, Path: "u/owner/s"}))
	return s
}

var refs = []rulebook.Ref{
	{Kind: rulebook.KindScript, Path: "u/owner/s"},
	{Kind: rulebook.KindFlow, Path: "f/fin/report"},
	{Kind: rulebook.KindApp, Path: "u/owner/shared"},
	{Kind: rulebook.KindScript, Path: "f/other/x"},
	{Kind: rulebook.KindFlow, Path: "u/owner/s"},      // exists only in "other"
	{Kind: rulebook.KindScript, Path: "u/owner/nope"}, // does not exist
	{Kind: rulebook.KindScript, Path: "hub/1/x"},      // malformed for the catalog
}

// Readable holds, per user, the indexes into refs they can read.
var readableTable = []struct {
	user    string
	want    []int
	wantErr error
}{
	{user: "admin", want: []int{0, 1, 2, 3}},
	{user: "owner", want: []int{0, 2}},
	{user: "freader", want: []int{1}},
	{user: "fwriter", want: []int{1}},
	{user: "fowner", want: []int{1}},
	{user: "grouped", want: []int{2}},
	{user: "direct", want: []int{2}},
	{user: "stranger", want: nil},
	{user: "disabled", wantErr: rulebook.ErrMemberDisabled},
	{user: "nobody", wantErr: rulebook.ErrNotMember},
}

func TestReadableTable(t *testing.T) {
	s := fixture(t)
	ctx := context.Background()
	for _, tc := range readableTable {
		t.Run(tc.user, func(t *testing.T) {
			got, err := s.ReadablePaths(ctx, tc.user, "w", refs)
			items, lerr := s.ListReadable(ctx, tc.user, "w", "", "", "", 500)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorIs(t, lerr, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.NoError(t, lerr)
			want := map[rulebook.Ref]struct{}{}
			for _, i := range tc.want {
				want[refs[i]] = struct{}{}
			}
			require.Equal(t, want, got, "ReadablePaths")
			listed := map[rulebook.Ref]struct{}{}
			for _, it := range items {
				listed[rulebook.Ref{Kind: it.Kind, Path: it.Path}] = struct{}{}
			}
			require.Equal(t, want, listed, "ListReadable agrees with ReadablePaths")
		})
	}
}

func TestReadablePathsOneQueryForThousandPaths(t *testing.T) {
	s := fixture(t)
	many := make([]rulebook.Ref, 0, 1000)
	for i := range 999 {
		many = append(many, rulebook.Ref{Kind: rulebook.KindScript, Path: fmt.Sprintf("u/owner/n%d", i)})
	}
	many = append(many, rulebook.Ref{Kind: rulebook.KindScript, Path: "u/owner/s"})
	got, err := s.ReadablePaths(context.Background(), "owner", "w", many)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestPinnedVersions(t *testing.T) {
	s := fixture(t)
	pins := []rulebook.Pin{
		{Path: "u/owner/s", Hash: "00000000000000a0"}, // an old version: valid
		{Path: "u/owner/s", Hash: "00000000000000a1"},
		{Path: "u/owner/s", Hash: "00000000000000b1"}, // another script's hash
		{Path: "f/other/x", Hash: "00000000000000a1"},
		{Path: "u/owner/s", Hash: "ffffffffffffffff"},
	}
	got, err := s.PinnedVersions(context.Background(), "w", pins)
	require.NoError(t, err)
	require.Equal(t, map[rulebook.Pin]struct{}{pins[0]: {}, pins[1]: {}}, got)
	_, err = s.PinnedVersions(context.Background(), "other", pins[:1])
	require.NoError(t, err)
}

func TestHashBelongsToOnePath(t *testing.T) {
	s := fixture(t)
	err := s.RegisterRunnable(context.Background(), store.Runnable{Workspace: "w", Kind: rulebook.KindScript,
		Path: "u/owner/thief", LatestHash: "00000000000000a1", Versions: []string{"00000000000000a1"}})
	require.ErrorIs(t, err, rulebook.ErrHashTaken)
}

// TestRLSFailsClosed reads the catalog as the reader role with no caller set: no rows, even
// though the table has rows in this workspace.
func TestRLSFailsClosed(t *testing.T) {
	ctx := context.Background()
	s, pool := storeWithW(t)
	require.NoError(t, s.RegisterRunnable(ctx, store.Runnable{Workspace: "w", Kind: rulebook.KindFlow, Path: "u/admin/f"}))
	for name, setup := range map[string]string{
		"nothing set":    ``,
		"workspace only": `SELECT set_config('millwright.caller_workspace', 'w', true)`,
		"admin, no user": `SELECT set_config('millwright.caller_workspace', 'w', true), set_config('millwright.caller_admin', 'true', true)`,
	} {
		t.Run(name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			if setup != "" {
				_, err = tx.Exec(ctx, setup)
				require.NoError(t, err)
			}
			_, err = tx.Exec(ctx, `SET LOCAL ROLE mw_policy_catalog_reader`)
			require.NoError(t, err)
			var n int
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM catalog_item`).Scan(&n))
			require.Zero(t, n)
		})
	}
}

// Builder rights can be turned on only through UpdateOperatorSettings, which prices the change:
// any other write (an import, a hand-written UPDATE, an INSERT with builder on) is refused by
// the database itself.
func TestBuilderOnOnlyThroughTheCheckedPath(t *testing.T) {
	ctx := context.Background()
	s, pool := storeWithW(t)
	newWorkspace(t, s, "v", "V")

	for name, sql := range map[string]string{
		"raw update":              `UPDATE workspace_settings SET operator_settings = '{"builder": true}' WHERE workspace_id = 'w'`,
		"merge in sql":            `UPDATE workspace_settings SET operator_settings = operator_settings || '{"builder": true}' WHERE workspace_id = 'w'`,
		"flag set for another ws": `SELECT set_config('millwright.builder_enable_checked', 'v', true); UPDATE workspace_settings SET operator_settings = '{"builder": true}' WHERE workspace_id = 'w'`,
		"insert with builder on":  `DELETE FROM workspace_settings WHERE workspace_id = 'v'; INSERT INTO workspace_settings VALUES ('v', '{"builder": true}')`,
	} {
		t.Run(name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, sql)
			require.ErrorContains(t, err, "without the seat check")
		})
	}

	var priced []int64
	ch, err := s.UpdateOperatorSettings(ctx, "w", rulebook.SettingsPatch{"builder": true},
		func(_ context.Context, head int64) error { priced = append(priced, head); return nil })
	require.NoError(t, err)
	require.True(t, ch.After.Builder)
	require.Len(t, priced, 1, "turning builder on is priced exactly once")
	require.Positive(t, ch.Position)

	// Turning it off, or re-saving it on, needs no check and is not refused.
	_, err = pool.Exec(ctx, `UPDATE workspace_settings SET operator_settings = '{"builder": true, "manage_schedules": false}' WHERE workspace_id = 'w'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE workspace_settings SET operator_settings = '{}' WHERE workspace_id = 'w'`)
	require.NoError(t, err)
}
