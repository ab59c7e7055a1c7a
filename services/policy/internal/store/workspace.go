package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// Member is one member row.
type Member struct {
	Workspace string
	Username  string
	Email     string
	Role      rulebook.Role
	Disabled  bool
}

// CreateWorkspace creates a workspace, its first admin and its (empty) settings row, so that
// every later settings change is an UPDATE the trigger sees.
//
// The first admin is a member write that may add seats (a new email is a new author), so it is
// priced like UpsertMember: check, when not nil, is called through checkSeats before anything
// is written, and an error from it aborts the creation. An existing workspace answers
// ErrAlreadyExists without asking (loading the same workspace again is not a seat change).
func (s *Store) CreateWorkspace(ctx context.Context, ws, name string, admin Member,
	check func(ctx context.Context, head int64) error) error {
	return s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM workspace WHERE id = $1)`, ws).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return rulebook.ErrAlreadyExists
		}
		if err := checkSeats(ctx, tx, check, memberGuard, ws+"/"+admin.Username); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO workspace (id, name) VALUES ($1, $2)`, ws, name); err != nil {
			if isUnique(err, "") {
				return rulebook.ErrAlreadyExists
			}
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO member (workspace_id, username, email, role) VALUES ($1, $2, $3, 'admin')`,
			ws, admin.Username, admin.Email); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO workspace_settings (workspace_id) VALUES ($1)`, ws)
		return err
	})
}

// keepsAnAdmin is ErrLastAdmin when the workspace, as the transaction leaves it, has no
// enabled admin.
func keepsAnAdmin(ctx context.Context, tx pgx.Tx, ws string) error {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM member WHERE workspace_id = $1 AND role = 'admin' AND NOT disabled`, ws).Scan(&n)
	if err == nil && n == 0 {
		return rulebook.ErrLastAdmin
	}
	return err
}

// UpsertMember inserts or updates a member. Refused (ErrLastAdmin) when it would leave the
// workspace without an enabled admin.
//
// A write that may add seats (member_may_add_seats, migration 00004: a new or re-enabled
// member, another email, an operator promoted) is priced first: check, when not nil, is called
// through checkSeats (the seat lock, then the stream head) and an error from it aborts the
// write. Writes that cannot add seats (disabling, demoting, re-saving) never call it.
func (s *Store) UpsertMember(ctx context.Context, m Member, check func(ctx context.Context, head int64) error) (Member, error) {
	err := s.inWorkspace(ctx, m.Workspace, func(tx pgx.Tx) error {
		// Under the workspace lock no other writer changes this member before commit, so the
		// row read here is the row the write replaces.
		var adds bool
		if err := tx.QueryRow(ctx, `
			SELECT member_may_add_seats(o.email, o.role, o.disabled, $3, $4, $5)
			FROM (VALUES (1)) AS one LEFT JOIN member o ON o.workspace_id = $1 AND o.username = $2`,
			m.Workspace, m.Username, m.Email, string(m.Role), m.Disabled).Scan(&adds); err != nil {
			return err
		}
		if adds {
			if err := checkSeats(ctx, tx, check, memberGuard, m.Workspace+"/"+m.Username); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO member (workspace_id, username, email, role, disabled) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (workspace_id, username) DO UPDATE
			SET email = EXCLUDED.email, role = EXCLUDED.role, disabled = EXCLUDED.disabled`,
			m.Workspace, m.Username, m.Email, string(m.Role), m.Disabled)
		if isUnique(err, "") {
			return errors.Join(rulebook.ErrAlreadyExists, errors.New("email already belongs to another member"))
		}
		if err != nil {
			return err
		}
		return keepsAnAdmin(ctx, tx, m.Workspace)
	})
	return m, err
}

// RemoveMember deletes a member, removes it from every group, folder grant and extra perm
// (so a later member of the same name inherits nothing), and revokes its tokens, all in one
// transaction.
func (s *Store) RemoveMember(ctx context.Context, ws, username string) error {
	return s.inWorkspace(ctx, ws, func(tx pgx.Tx) error {
		if err := deleteOne(ctx, tx, "member", username, `DELETE FROM member WHERE workspace_id = $1 AND username = $2`, ws, username); err != nil {
			return err
		}
		if err := keepsAnAdmin(ctx, tx, ws); err != nil {
			return err
		}
		if err := forgetPrincipal(ctx, tx, ws, "u/"+username); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE workspace_group SET members = array_remove(members, $2)
			WHERE workspace_id = $1 AND $2 = ANY (members)`, ws, username); err != nil {
			return err
		}
		// kind = 'user' keeps the update on token_user (indexed by member), away from the
		// daily job-token partitions.
		_, err := tx.Exec(ctx, `UPDATE token SET revoked_at = now()
			WHERE kind = 'user' AND workspace_id = $1 AND username = $2 AND revoked_at IS NULL`, ws, username)
		return err
	})
}

// inWorkspace runs fn in a read-write transaction holding the workspace's lock
// (lockWorkspace): every change to a workspace's members, groups, folders and tags.
func (s *Store) inWorkspace(ctx context.Context, ws string, fn func(tx pgx.Tx) error) error {
	return s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		if err := lockWorkspace(ctx, tx, ws); err != nil {
			return err
		}
		return fn(tx)
	})
}

// deleteOne runs a DELETE of the one row named name; NotFound(kind, name) when there was none.
func deleteOne(ctx context.Context, tx pgx.Tx, kind, name, sql string, args ...any) error {
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return rulebook.NotFound(kind, name)
	}
	return nil
}

// forgetPrincipal removes a principal from every folder grant and catalog extra perm.
func forgetPrincipal(ctx context.Context, tx pgx.Tx, ws, principal string) error {
	if _, err := tx.Exec(ctx, `
		UPDATE folder SET owners = array_remove(owners, $2), readers = array_remove(readers, $2),
		                  writers = array_remove(writers, $2)
		WHERE workspace_id = $1 AND $2 = ANY (owners || readers || writers)`, ws, principal); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE catalog_item SET extra_perms = extra_perms - $2
		WHERE workspace_id = $1 AND extra_perms ? $2`, ws, principal)
	return err
}

// missingPrincipal returns the first principal of list that names no member or group.
func missingPrincipal(ctx context.Context, tx pgx.Tx, ws string, list []string) (string, error) {
	if len(list) == 0 {
		return "", nil
	}
	var p string
	err := tx.QueryRow(ctx, `
		SELECT p FROM unnest($2::text[]) WITH ORDINALITY AS l(p, i)
		WHERE NOT ((split_part(p, '/', 1) = 'u' AND EXISTS (
		              SELECT 1 FROM member m WHERE m.workspace_id = $1 AND m.username = split_part(p, '/', 2)))
		        OR (split_part(p, '/', 1) = 'g' AND EXISTS (
		              SELECT 1 FROM workspace_group g WHERE g.workspace_id = $1 AND g.name = split_part(p, '/', 2))))
		ORDER BY i LIMIT 1`, ws, list).Scan(&p)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return p, err
}

// UpsertGroup creates or replaces a group. Every member must exist.
func (s *Store) UpsertGroup(ctx context.Context, ws, name string, members []string) ([]string, error) {
	members = rulebook.Normalize(members)
	err := s.inWorkspace(ctx, ws, func(tx pgx.Tx) error {
		users := make([]string, len(members))
		for i, m := range members {
			users[i] = "u/" + m
		}
		if p, err := missingPrincipal(ctx, tx, ws, users); err != nil {
			return err
		} else if p != "" {
			return rulebook.NotFound("member", p[2:])
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO workspace_group (workspace_id, name, members) VALUES ($1, $2, $3)
			ON CONFLICT (workspace_id, name) DO UPDATE SET members = EXCLUDED.members`, ws, name, members)
		return err
	})
	return members, err
}

// DeleteGroup deletes a group and every grant naming it.
func (s *Store) DeleteGroup(ctx context.Context, ws, name string) error {
	return s.inWorkspace(ctx, ws, func(tx pgx.Tx) error {
		if err := deleteOne(ctx, tx, "group", name, `DELETE FROM workspace_group WHERE workspace_id = $1 AND name = $2`, ws, name); err != nil {
			return err
		}
		return forgetPrincipal(ctx, tx, ws, "g/"+name)
	})
}

// UpsertFolder creates or replaces a folder's grants. Every principal must exist.
func (s *Store) UpsertFolder(ctx context.Context, ws string, f rulebook.FolderGrants) (rulebook.FolderGrants, error) {
	f.Owners, f.Readers, f.Writers = rulebook.Normalize(f.Owners), rulebook.Normalize(f.Readers), rulebook.Normalize(f.Writers)
	err := s.inWorkspace(ctx, ws, func(tx pgx.Tx) error {
		all := append(append(append([]string{}, f.Owners...), f.Readers...), f.Writers...)
		if p, err := missingPrincipal(ctx, tx, ws, all); err != nil {
			return err
		} else if p != "" {
			return rulebook.NotFound("principal", p)
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO folder (workspace_id, name, owners, readers, writers) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (workspace_id, name) DO UPDATE
			SET owners = EXCLUDED.owners, readers = EXCLUDED.readers, writers = EXCLUDED.writers`,
			ws, f.Name, f.Owners, f.Readers, f.Writers)
		return err
	})
	return f, err
}

// DeleteFolder deletes a folder. Its items stay in the catalog, readable by admins and their
// extra perms only.
func (s *Store) DeleteFolder(ctx context.Context, ws, name string) error {
	return s.inWorkspace(ctx, ws, func(tx pgx.Tx) error {
		return deleteOne(ctx, tx, "folder", name, `DELETE FROM folder WHERE workspace_id = $1 AND name = $2`, ws, name)
	})
}

// By selects how ResolveTenancy finds the member.
type By int

// Lookup keys.
const (
	ByUsername By = iota + 1
	ByEmail
)

// ResolveTenancy returns a member's tenancy. ErrNotMember for no such member (or no such
// workspace), ErrMemberDisabled for a disabled one: never an empty tenancy.
func (s *Store) ResolveTenancy(ctx context.Context, ws string, by By, value string) (rulebook.Tenancy, error) {
	var t rulebook.Tenancy
	err := s.inTx(ctx, snapshot, func(tx pgx.Tx) error {
		var err error
		t, err = resolveTenancy(ctx, tx, ws, by, value)
		return err
	})
	return t, err
}

// resolveTenancy is the one implementation of "who is this member": role, groups, folders.
func resolveTenancy(ctx context.Context, tx pgx.Tx, ws string, by By, value string) (rulebook.Tenancy, error) {
	col := "username"
	if by == ByEmail {
		col = "email"
	}
	t := rulebook.Tenancy{Workspace: ws}
	var role string
	err := tx.QueryRow(ctx, `
		SELECT m.username, m.email, m.role, m.disabled,
		       coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM workspace_group g
		                  WHERE g.workspace_id = m.workspace_id AND m.username = ANY (g.members)), '{}')
		FROM member m WHERE m.workspace_id = $1 AND m.`+col+` = $2`, ws, value).
		Scan(&t.Username, &t.Email, &role, &t.Disabled, &t.Groups)
	if errors.Is(err, pgx.ErrNoRows) {
		return rulebook.Tenancy{}, rulebook.ErrNotMember
	}
	if err != nil {
		return rulebook.Tenancy{}, err
	}
	t.Role = rulebook.Role(role)
	if t.Disabled {
		return rulebook.Tenancy{}, rulebook.ErrMemberDisabled
	}
	principals := t.Principals()
	rows, err := tx.Query(ctx, `
		SELECT name, owners, readers, writers FROM folder
		WHERE workspace_id = $1 AND (owners && $2 OR readers && $2 OR writers && $2) ORDER BY name`, ws, principals)
	if err != nil {
		return rulebook.Tenancy{}, err
	}
	grants, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rulebook.FolderGrants, error) {
		var f rulebook.FolderGrants
		err := r.Scan(&f.Name, &f.Owners, &f.Readers, &f.Writers)
		return f, err
	})
	if err != nil {
		return rulebook.Tenancy{}, err
	}
	for _, f := range grants {
		if a, ok := rulebook.AccessTo(principals, f); ok {
			t.Folders = append(t.Folders, a)
		}
	}
	return t, nil
}

// WorkspaceBuilder is one workspace's builder flag.
type WorkspaceBuilder struct {
	Workspace string
	Builder   bool
}

// Snapshot is every member and builder flag, consistent with stream position Position.
type Snapshot struct {
	Members    []Member
	Workspaces []WorkspaceBuilder
	Position   int64
}

// MembershipSnapshot reads members and builder flags in one REPEATABLE READ snapshot taken
// after the stream head Position was read: every event with an id <= Position is reflected;
// some after it may be too (a consumer applies them again, idempotently).
func (s *Store) MembershipSnapshot(ctx context.Context) (Snapshot, error) {
	h, err := stream.Head(ctx, s.pool)
	if err != nil {
		return Snapshot{}, err
	}
	var snap Snapshot
	err = s.inTx(ctx, snapshot, func(tx pgx.Tx) error {
		snap = Snapshot{Position: h}
		rows, err := tx.Query(ctx, `SELECT workspace_id, username, email, role, disabled FROM member ORDER BY workspace_id, username`)
		if err != nil {
			return err
		}
		snap.Members, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
			var m Member
			var role string
			err := r.Scan(&m.Workspace, &m.Username, &m.Email, &role, &m.Disabled)
			m.Role = rulebook.Role(role)
			return m, err
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT w.id, s.operator_settings FROM workspace w
			LEFT JOIN workspace_settings s ON s.workspace_id = w.id ORDER BY w.id`)
		if err != nil {
			return err
		}
		snap.Workspaces, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (WorkspaceBuilder, error) {
			var wb WorkspaceBuilder
			var raw []byte
			if err := r.Scan(&wb.Workspace, &raw); err != nil {
				return wb, err
			}
			st, err := rulebook.ResolveOperatorSettings(raw)
			wb.Builder = st.Builder
			return wb, err
		})
		return err
	})
	return snap, err
}
