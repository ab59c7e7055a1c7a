package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// The read-back of every resource that can be created (issue 17): one Get by key and one List
// per resource. A List reads by key after the previous page's last key (keyset paging, on an
// index whose order is the page's), at most limit rows, so a page costs the same however deep
// it is. Every query names its workspace; the caller's authorization is the api's.

// Workspace is a workspace row.
type Workspace struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// Group is a group row.
type Group struct {
	Name    string
	Members []string
}

// TokenInfo is a user token's metadata (never its digest).
type TokenInfo struct {
	ID        string
	Username  string
	Scopes    []string
	Label     string
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
}

// page runs sql, whose last parameter is its LIMIT, for at most limit rows; more reports
// whether another page follows (one row more was read to know).
func page[T any](ctx context.Context, s *Store, limit int, scan pgx.RowToFunc[T], sql string, args ...any) (rows []T, more bool, err error) {
	r, err := s.pool.Query(ctx, sql, append(args, limit+1)...)
	if err != nil {
		return nil, false, err
	}
	out, err := pgx.CollectRows(r, scan)
	if err != nil {
		return nil, false, err
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// one reads one row, NotFound(kind, name) if there is none.
func one[T any](ctx context.Context, s *Store, kind, name string, scan pgx.RowToFunc[T], sql string, args ...any) (T, error) {
	r, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	out, err := pgx.CollectExactlyOneRow(r, scan)
	if errNoRows(err) {
		return out, rulebook.NotFound(kind, name)
	}
	return out, err
}

func scanWorkspace(row pgx.CollectableRow) (Workspace, error) {
	var w Workspace
	return w, row.Scan(&w.ID, &w.Name, &w.CreatedAt)
}

// GetWorkspace reads one workspace.
func (s *Store) GetWorkspace(ctx context.Context, ws string) (Workspace, error) {
	return one(ctx, s, "workspace", ws, scanWorkspace, `SELECT id, name, created_at FROM workspace WHERE id = $1`, ws)
}

// ListWorkspaces reads the workspaces after id `after`, by id.
func (s *Store) ListWorkspaces(ctx context.Context, after string, limit int) ([]Workspace, bool, error) {
	return page(ctx, s, limit, scanWorkspace, `SELECT id, name, created_at FROM workspace WHERE id > $1 ORDER BY id LIMIT $2`, after)
}

const memberColumns = `workspace_id, username, email, role, disabled`

func scanMember(row pgx.CollectableRow) (Member, error) {
	var m Member
	var role string
	err := row.Scan(&m.Workspace, &m.Username, &m.Email, &role, &m.Disabled)
	m.Role = rulebook.Role(role)
	return m, err
}

// GetMember reads one member.
func (s *Store) GetMember(ctx context.Context, ws, username string) (Member, error) {
	return one(ctx, s, "member", username, scanMember,
		`SELECT `+memberColumns+` FROM member WHERE workspace_id = $1 AND username = $2`, ws, username)
}

// ListMembers reads ws's members after username `after`, by username: of role ("" any), and
// disabled ones only if asked.
func (s *Store) ListMembers(ctx context.Context, ws string, role rulebook.Role, withDisabled bool, after string, limit int) ([]Member, bool, error) {
	return page(ctx, s, limit, scanMember, `SELECT `+memberColumns+` FROM member
WHERE workspace_id = $1 AND username > $2 AND ($3 = '' OR role = $3) AND ($4 OR NOT disabled)
ORDER BY username LIMIT $5`, ws, after, string(role), withDisabled)
}

func scanGroup(row pgx.CollectableRow) (Group, error) {
	var g Group
	return g, row.Scan(&g.Name, &g.Members)
}

// GetGroup reads one group.
func (s *Store) GetGroup(ctx context.Context, ws, name string) (Group, error) {
	return one(ctx, s, "group", name, scanGroup, `SELECT name, members FROM workspace_group WHERE workspace_id = $1 AND name = $2`, ws, name)
}

// ListGroups reads ws's groups after name `after`, by name; with member, only its groups.
func (s *Store) ListGroups(ctx context.Context, ws, member, after string, limit int) ([]Group, bool, error) {
	return page(ctx, s, limit, scanGroup, `SELECT name, members FROM workspace_group
WHERE workspace_id = $1 AND name > $2 AND ($3 = '' OR $3 = ANY (members)) ORDER BY name LIMIT $4`, ws, after, member)
}

func scanFolder(row pgx.CollectableRow) (rulebook.FolderGrants, error) {
	var f rulebook.FolderGrants
	return f, row.Scan(&f.Name, &f.Owners, &f.Readers, &f.Writers)
}

// GetFolder reads one folder.
func (s *Store) GetFolder(ctx context.Context, ws, name string) (rulebook.FolderGrants, error) {
	return one(ctx, s, "folder", name, scanFolder,
		`SELECT name, owners, readers, writers FROM folder WHERE workspace_id = $1 AND name = $2`, ws, name)
}

// ListFolders reads ws's folders after name `after`, by name.
func (s *Store) ListFolders(ctx context.Context, ws, after string, limit int) ([]rulebook.FolderGrants, bool, error) {
	return page(ctx, s, limit, scanFolder, `SELECT name, owners, readers, writers FROM folder
WHERE workspace_id = $1 AND name > $2 ORDER BY name LIMIT $3`, ws, after)
}

const runnableColumns = `workspace_id, kind, path, coalesce(latest_hash, ''), on_behalf_of, extra_perms`

func scanRunnable(row pgx.CollectableRow) (Runnable, error) {
	var r Runnable
	var kind string
	var perms []byte
	if err := row.Scan(&r.Workspace, &kind, &r.Path, &r.LatestHash, &r.OnBehalfOf, &perms); err != nil {
		return r, err
	}
	r.Kind = rulebook.Kind(kind)
	return r, json.Unmarshal(perms, &r.ExtraPerms)
}

// GetRunnable reads one catalog item with its extra perms (not its versions: ListScriptVersions).
func (s *Store) GetRunnable(ctx context.Context, ws string, kind rulebook.Kind, path string) (Runnable, error) {
	return one(ctx, s, string(kind), path, scanRunnable, `SELECT `+runnableColumns+` FROM catalog_item
WHERE workspace_id = $1 AND kind = $2 AND path = $3`, ws, string(kind), path)
}

// ListRunnables reads ws's catalog after (afterKind, afterPath), by (kind, path): of kind (""
// any) and with paths starting with prefix.
func (s *Store) ListRunnables(ctx context.Context, ws string, kind rulebook.Kind, prefix string, afterKind, afterPath string, limit int) ([]Runnable, bool, error) {
	return page(ctx, s, limit, scanRunnable, `SELECT `+runnableColumns+` FROM catalog_item
WHERE workspace_id = $1 AND (kind, path) > ($2, $3) AND ($4 = '' OR kind = $4) AND starts_with(path, $5)
ORDER BY kind, path LIMIT $6`, ws, afterKind, afterPath, string(kind), prefix)
}

// ListScriptVersions reads a script's version hashes after `after`, by hash. NotFound if ws
// has no script at path.
func (s *Store) ListScriptVersions(ctx context.Context, ws, path, after string, limit int) ([]string, bool, error) {
	if _, err := s.GetRunnable(ctx, ws, rulebook.KindScript, path); err != nil {
		return nil, false, err
	}
	return page(ctx, s, limit, pgx.RowTo[string], `SELECT hash FROM script_version
WHERE workspace_id = $1 AND path = $2 AND hash > $3 ORDER BY hash LIMIT $4`, ws, path, after)
}

func scanRunRow(row pgx.CollectableRow) (Run, error) { return scanRun(row) }

// GetRun reads one run of ws (retained runs only).
func (s *Store) GetRun(ctx context.Context, ws, jobID string) (Run, error) {
	return one(ctx, s, "run", jobID, scanRunRow, `SELECT `+runColumns+` FROM run WHERE job_id = $1 AND workspace_id = $2`, jobID, ws)
}

// RunKey is where a page of runs ends: runs are listed newest first, by (created_at, job_id).
type RunKey struct {
	CreatedAt time.Time
	JobID     string
}

// ListRuns reads ws's runs before key (nil: from the newest), newest first: permissioned as
// permissionedAs ("" any), only unfinished ones if asked.
func (s *Store) ListRuns(ctx context.Context, ws, permissionedAs string, runningOnly bool, before *RunKey, limit int) ([]Run, bool, error) {
	var at *time.Time
	var id *string
	if before != nil {
		at, id = &before.CreatedAt, &before.JobID
	}
	return page(ctx, s, limit, scanRunRow, `SELECT `+runColumns+` FROM run
WHERE workspace_id = $1 AND ($2::timestamptz IS NULL OR (created_at, job_id) < ($2, $3::uuid))
  AND ($4 = '' OR permissioned_as = $4) AND (NOT $5 OR finished_at IS NULL)
ORDER BY created_at DESC, job_id DESC LIMIT $6`, ws, at, id, permissionedAs, runningOnly)
}

const tokenColumns = `id, username, scopes, label, created_at, expires_at, revoked_at`

func scanToken(row pgx.CollectableRow) (TokenInfo, error) {
	var t TokenInfo
	return t, row.Scan(&t.ID, &t.Username, &t.Scopes, &t.Label, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt)
}

// GetToken reads a user token's metadata; with onlyUser, only if it is that member's (NotFound
// otherwise: another member's token is not even confirmed to exist).
func (s *Store) GetToken(ctx context.Context, ws, id, onlyUser string) (TokenInfo, error) {
	return one(ctx, s, "token", id, scanToken, `SELECT `+tokenColumns+` FROM token_user
WHERE workspace_id = $1 AND id = $2 AND ($3 = '' OR username = $3)`, ws, id, onlyUser)
}

// ListTokens reads ws's user tokens after id `after`, by id: of username ("" any), and revoked
// or expired ones only if asked.
func (s *Store) ListTokens(ctx context.Context, ws, username string, inactive bool, after string, limit int) ([]TokenInfo, bool, error) {
	return page(ctx, s, limit, scanToken, `SELECT `+tokenColumns+` FROM token_user
WHERE workspace_id = $1 AND id > $2 AND ($3 = '' OR username = $3) AND ($4 OR (revoked_at IS NULL AND expires_at > now()))
ORDER BY id LIMIT $5`, ws, after, username, inactive)
}
