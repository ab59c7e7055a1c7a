package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// Runnable is a catalog item to register.
type Runnable struct {
	Workspace  string
	Kind       rulebook.Kind
	Path       string
	LatestHash string   // scripts only
	Versions   []string // scripts only: every version hash, LatestHash included
	OnBehalfOf string
	ExtraPerms map[string]bool // principal -> write
}

// Item is a readable catalog item.
type Item struct {
	Kind       rulebook.Kind
	Path       string
	LatestHash string
	OnBehalfOf string
}

// RegisterRunnable creates or replaces a catalog item (and, for a script, its exact set of
// version hashes). Extra-perm principals must exist; a hash owned by another path is refused
// (ErrHashTaken).
func (s *Store) RegisterRunnable(ctx context.Context, r Runnable) error {
	perms := r.ExtraPerms
	if perms == nil {
		perms = map[string]bool{}
	}
	permsJSON, err := json.Marshal(perms)
	if err != nil {
		return err
	}
	var latest *string
	if r.Kind == rulebook.KindScript {
		latest = &r.LatestHash
	}
	return s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		if err := workspaceExists(ctx, tx, r.Workspace); err != nil {
			return err
		}
		names := make([]string, 0, len(perms)+1)
		for p := range perms {
			names = append(names, p)
		}
		// Whoever the runnable runs as must exist too: a step composing it runs as them.
		if r.OnBehalfOf != "" {
			names = append(names, r.OnBehalfOf)
		}
		if p, err := missingPrincipal(ctx, tx, r.Workspace, rulebook.Normalize(names)); err != nil {
			return err
		} else if p != "" {
			return rulebook.NotFound("principal", p)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO catalog_item (workspace_id, kind, path, latest_hash, on_behalf_of, extra_perms)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (workspace_id, kind, path) DO UPDATE
			SET latest_hash = EXCLUDED.latest_hash, on_behalf_of = EXCLUDED.on_behalf_of,
			    extra_perms = EXCLUDED.extra_perms`,
			r.Workspace, string(r.Kind), r.Path, latest, r.OnBehalfOf, permsJSON); err != nil {
			return err
		}
		if r.Kind != rulebook.KindScript {
			return nil
		}
		versions := rulebook.Normalize(r.Versions)
		if _, err := tx.Exec(ctx, `DELETE FROM script_version WHERE workspace_id = $1 AND path = $2 AND NOT (hash = ANY ($3))`,
			r.Workspace, r.Path, versions); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO script_version (workspace_id, path, hash) SELECT $1, $2, h FROM unnest($3::text[]) h
			ON CONFLICT (workspace_id, path, hash) DO NOTHING`, r.Workspace, r.Path, versions)
		if isUnique(err, "script_version_workspace_id_hash_key") {
			return rulebook.ErrHashTaken
		}
		return err
	})
}

// RemoveRunnable removes a catalog item (a script with its versions).
func (s *Store) RemoveRunnable(ctx context.Context, ws string, kind rulebook.Kind, path string) error {
	return s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		return deleteOne(ctx, tx, string(kind), path,
			`DELETE FROM catalog_item WHERE workspace_id = $1 AND kind = $2 AND path = $3`, ws, string(kind), path)
	})
}

// asCaller runs fn in a read-only snapshot transaction in which catalog_item shows only the
// rows the caller may read: the caller's tenancy is resolved, set with set_config(..., true)
// (transaction-local) and the transaction switches to mw_policy_catalog_reader, which RLS
// applies to. This is the only way the store reads the catalog for a caller. A non-member or
// disabled caller gets its error and reads nothing.
func (s *Store) asCaller(ctx context.Context, ws, username string, fn func(pgx.Tx) error) error {
	return s.inTx(ctx, snapshot, func(tx pgx.Tx) error {
		t, err := resolveTenancy(ctx, tx, ws, ByUsername, username)
		if err != nil {
			return err
		}
		admin := "false"
		if t.IsAdmin() {
			admin = "true"
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('millwright.caller_workspace', $1, true),
		                                  set_config('millwright.caller_username', $2, true),
		                                  set_config('millwright.caller_admin', $3, true),
		                                  set_config('millwright.caller_folders', $4, true),
		                                  set_config('millwright.caller_principals', $5, true)`,
			t.Workspace, t.Username, admin,
			strings.Join(t.ReadableFolders(), ","), strings.Join(t.Principals(), ",")); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE mw_policy_catalog_reader`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// ReadablePaths returns the subset of refs the member caller can read in workspace, checked in
// one query under row-level security (the builder re-checks up to 1,000 paths per flow).
// Malformed or absent paths are simply not in the result. ErrNotMember / ErrMemberDisabled
// when the caller is not an enabled member.
func (s *Store) ReadablePaths(ctx context.Context, caller, workspace string, refs []rulebook.Ref) (map[rulebook.Ref]struct{}, error) {
	out := map[rulebook.Ref]struct{}{}
	if len(refs) == 0 {
		return out, nil
	}
	kinds, paths := unzip(refs, func(r rulebook.Ref) (string, string) { return string(r.Kind), r.Path })
	err := s.asCaller(ctx, workspace, caller, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT c.kind, c.path FROM catalog_item c
			JOIN unnest($2::text[], $3::text[]) AS r(kind, path) ON c.kind = r.kind AND c.path = r.path
			WHERE c.workspace_id = $1`, workspace, kinds, paths)
		if err != nil {
			return err
		}
		var k, p string
		_, err = pgx.ForEachRow(rows, []any{&k, &p}, func() error {
			out[rulebook.Ref{Kind: rulebook.Kind(k), Path: p}] = struct{}{}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListReadable lists at most limit items of kind ("" for all) the caller can read after
// (afterKind, afterPath), sorted by kind then path, through the same row-level-security policy
// as ReadablePaths.
func (s *Store) ListReadable(ctx context.Context, caller, workspace string, kind rulebook.Kind, afterKind, afterPath string, limit int) ([]Item, error) {
	var items []Item
	err := s.asCaller(ctx, workspace, caller, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT kind, path, coalesce(latest_hash, ''), on_behalf_of FROM catalog_item
			WHERE workspace_id = $1 AND ($2 = '' OR kind = $2) AND (kind, path) > ($3, $4)
			ORDER BY kind, path LIMIT $5`, workspace, string(kind), afterKind, afterPath, limit)
		if err != nil {
			return err
		}
		items, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Item, error) {
			var it Item
			var k string
			err := r.Scan(&k, &it.Path, &it.LatestHash, &it.OnBehalfOf)
			it.Kind = rulebook.Kind(k)
			return it, err
		})
		return err
	})
	return items, err
}

// PinnedVersions returns the subset of pins that name a stored version of that very script
// path in workspace, in one query. It says nothing about readability: check the paths with
// ReadablePaths too.
func (s *Store) PinnedVersions(ctx context.Context, workspace string, pins []rulebook.Pin) (map[rulebook.Pin]struct{}, error) {
	out := map[rulebook.Pin]struct{}{}
	if len(pins) == 0 {
		return out, nil
	}
	paths, hashes := unzip(pins, func(p rulebook.Pin) (string, string) { return p.Path, p.Hash })
	rows, err := s.pool.Query(ctx, `
		SELECT v.path, v.hash FROM script_version v
		JOIN unnest($2::text[], $3::text[]) AS p(path, hash) ON v.path = p.path AND v.hash = p.hash
		WHERE v.workspace_id = $1`, workspace, paths, hashes)
	if err != nil {
		return nil, err
	}
	var p, h string
	if _, err := pgx.ForEachRow(rows, []any{&p, &h}, func() error {
		out[rulebook.Pin{Path: p, Hash: h}] = struct{}{}
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// unzip splits items into two parallel columns, the arguments of an unnest($n, $m) join.
func unzip[T, A, B any](items []T, split func(T) (A, B)) ([]A, []B) {
	as, bs := make([]A, len(items)), make([]B, len(items))
	for i, it := range items {
		as[i], bs[i] = split(it)
	}
	return as, bs
}

// errNoRows reports pgx.ErrNoRows.
func errNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
