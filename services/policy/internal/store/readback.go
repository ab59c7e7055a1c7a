package store

import (
	"context"
	"encoding/json"
	"errors"
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

// maxScan bounds the rows one page reads, whatever the filters: a filter matching few rows
// of a large workspace (every retained run, every token a member minted) must not make one
// call read them all. A page that stops there is shorter than asked, with a token to go on
// (AIP-158 allows short pages): the caller pays in calls for what it asks.
const maxScan = 2000

// scanLimit is how many rows a page of limit may read: ten times the page, at most maxScan.
func scanLimit(limit int) int { return min(maxScan, 10*(limit+1)) }

// keyset reads one page. sql selects what scan reads and, last, whether the row matches the
// request's filters; it is ordered by the key (key gives a row's) and its last parameter is
// its LIMIT, which keyset sets to scanLimit(limit). next is the key the following page starts
// after: the page's last row when it is full, the last row read when the bound stopped it
// short, nil when there is nothing more.
func keyset[T any](ctx context.Context, s *Store, limit int, scan func(pgx.CollectableRow, ...any) (T, error),
	key func(T) []string, sql string, args ...any) (page []T, next []string, err error) {
	n := scanLimit(limit)
	rows, err := s.pool.Query(ctx, sql, append(args, n)...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var last T
	read := 0
	for rows.Next() {
		var hit bool
		row, err := scan(rows, &hit)
		if err != nil {
			return nil, nil, err
		}
		read, last = read+1, row
		if !hit {
			continue
		}
		if len(page) == limit { // one match more: the page is full and another follows
			return page, key(page[limit-1]), nil
		}
		page = append(page, row)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if read == n {
		return page, key(last), nil
	}
	return page, nil, nil
}

// one reads one row, NotFound(kind, name) if there is none.
func one[T any](ctx context.Context, s *Store, kind, name string, scan func(pgx.CollectableRow, ...any) (T, error), sql string, args ...any) (T, error) {
	r, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	out, err := pgx.CollectExactlyOneRow(r, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	if errNoRows(err) {
		return out, rulebook.NotFound(kind, name)
	}
	return out, err
}

// The scan functions read a row's columns, then extra (keyset's filter column).

func scanWorkspace(row pgx.CollectableRow, extra ...any) (Workspace, error) {
	var w Workspace
	return w, row.Scan(append([]any{&w.ID, &w.Name, &w.CreatedAt}, extra...)...)
}

// GetWorkspace reads one workspace.
func (s *Store) GetWorkspace(ctx context.Context, ws string) (Workspace, error) {
	return one(ctx, s, "workspace", ws, scanWorkspace, `SELECT id, name, created_at FROM workspace WHERE id = $1`, ws)
}

// ListWorkspaces reads the workspaces after id `after`, by id.
func (s *Store) ListWorkspaces(ctx context.Context, after string, limit int) ([]Workspace, []string, error) {
	return keyset(ctx, s, limit, scanWorkspace, func(w Workspace) []string { return []string{w.ID} },
		`SELECT id, name, created_at, true FROM workspace WHERE id > $1 ORDER BY id LIMIT $2`, after)
}

const memberColumns = `workspace_id, username, email, role, disabled`

func scanMember(row pgx.CollectableRow, extra ...any) (Member, error) {
	var m Member
	var role string
	err := row.Scan(append([]any{&m.Workspace, &m.Username, &m.Email, &role, &m.Disabled}, extra...)...)
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
func (s *Store) ListMembers(ctx context.Context, ws string, role rulebook.Role, withDisabled bool, after string, limit int) ([]Member, []string, error) {
	return keyset(ctx, s, limit, scanMember, func(m Member) []string { return []string{m.Username} },
		`SELECT `+memberColumns+`, ($3 = '' OR role = $3) AND ($4 OR NOT disabled) FROM member
WHERE workspace_id = $1 AND username > $2 ORDER BY username LIMIT $5`, ws, after, string(role), withDisabled)
}

func scanGroup(row pgx.CollectableRow, extra ...any) (Group, error) {
	var g Group
	return g, row.Scan(append([]any{&g.Name, &g.Members}, extra...)...)
}

// GetGroup reads one group.
func (s *Store) GetGroup(ctx context.Context, ws, name string) (Group, error) {
	return one(ctx, s, "group", name, scanGroup, `SELECT name, members FROM workspace_group WHERE workspace_id = $1 AND name = $2`, ws, name)
}

// ListGroups reads ws's groups after name `after`, by name; with member, only its groups.
func (s *Store) ListGroups(ctx context.Context, ws, member, after string, limit int) ([]Group, []string, error) {
	return keyset(ctx, s, limit, scanGroup, func(g Group) []string { return []string{g.Name} },
		`SELECT name, members, $3 = '' OR $3 = ANY (members) FROM workspace_group
WHERE workspace_id = $1 AND name > $2 ORDER BY name LIMIT $4`, ws, after, member)
}

func scanFolder(row pgx.CollectableRow, extra ...any) (rulebook.FolderGrants, error) {
	var f rulebook.FolderGrants
	return f, row.Scan(append([]any{&f.Name, &f.Owners, &f.Readers, &f.Writers}, extra...)...)
}

// GetFolder reads one folder.
func (s *Store) GetFolder(ctx context.Context, ws, name string) (rulebook.FolderGrants, error) {
	return one(ctx, s, "folder", name, scanFolder,
		`SELECT name, owners, readers, writers FROM folder WHERE workspace_id = $1 AND name = $2`, ws, name)
}

// ListFolders reads ws's folders after name `after`, by name.
func (s *Store) ListFolders(ctx context.Context, ws, after string, limit int) ([]rulebook.FolderGrants, []string, error) {
	return keyset(ctx, s, limit, scanFolder, func(f rulebook.FolderGrants) []string { return []string{f.Name} },
		`SELECT name, owners, readers, writers, true FROM folder WHERE workspace_id = $1 AND name > $2 ORDER BY name LIMIT $3`, ws, after)
}

const runnableColumns = `workspace_id, kind, path, coalesce(latest_hash, ''), on_behalf_of, extra_perms`

func scanRunnable(row pgx.CollectableRow, extra ...any) (Runnable, error) {
	var r Runnable
	var kind string
	var perms []byte
	if err := row.Scan(append([]any{&r.Workspace, &kind, &r.Path, &r.LatestHash, &r.OnBehalfOf, &perms}, extra...)...); err != nil {
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
func (s *Store) ListRunnables(ctx context.Context, ws string, kind rulebook.Kind, prefix string, afterKind, afterPath string, limit int) ([]Runnable, []string, error) {
	return keyset(ctx, s, limit, scanRunnable, func(r Runnable) []string { return []string{string(r.Kind), r.Path} },
		`SELECT `+runnableColumns+`, ($4 = '' OR kind = $4) AND starts_with(path, $5) FROM catalog_item
WHERE workspace_id = $1 AND (kind, path) > ($2, $3) ORDER BY kind, path LIMIT $6`, ws, afterKind, afterPath, string(kind), prefix)
}

func scanHash(row pgx.CollectableRow, extra ...any) (string, error) {
	var h string
	return h, row.Scan(append([]any{&h}, extra...)...)
}

// ListScriptVersions reads a script's version hashes after `after`, by hash. NotFound if ws
// has no script at path.
func (s *Store) ListScriptVersions(ctx context.Context, ws, path, after string, limit int) ([]string, []string, error) {
	if _, err := s.GetRunnable(ctx, ws, rulebook.KindScript, path); err != nil {
		return nil, nil, err
	}
	return keyset(ctx, s, limit, scanHash, func(h string) []string { return []string{h} },
		`SELECT hash, true FROM script_version WHERE workspace_id = $1 AND path = $2 AND hash > $3 ORDER BY hash LIMIT $4`, ws, path, after)
}

func scanRunRow(row pgx.CollectableRow, extra ...any) (Run, error) {
	var r Run
	var origin string
	err := row.Scan(append([]any{&r.JobID, &r.Workspace, &r.PermissionedAs, &origin, &r.Viewer, &r.ParentJobID, &r.TokenID,
		&r.CreatedAt, &r.FinishedAt}, extra...)...)
	r.Origin = rulebook.Origin(origin)
	return r, err
}

// GetRun reads one run of ws (retained runs only).
func (s *Store) GetRun(ctx context.Context, ws, jobID string) (Run, error) {
	return one(ctx, s, "run", jobID, scanRunRow, `SELECT `+runColumns+` FROM run WHERE job_id = $1 AND workspace_id = $2`, jobID, ws)
}

// RunKey is a run's place in ListRuns' order (newest first): its created_at, in RFC 3339 with
// nanoseconds, and its job id.
func RunKey(r Run) []string { return []string{r.CreatedAt.UTC().Format(time.RFC3339Nano), r.JobID} }

// ListRuns reads ws's runs before key (nil: from the newest; else a RunKey), newest first:
// permissioned as permissionedAs ("" any), only unfinished ones if asked.
func (s *Store) ListRuns(ctx context.Context, ws, permissionedAs string, runningOnly bool, before []string, limit int) ([]Run, []string, error) {
	var at *time.Time
	var id *string
	if before != nil {
		t, err := time.Parse(time.RFC3339Nano, before[0])
		if err != nil || !rulebook.ValidJobID(before[1]) {
			return nil, nil, ErrBadKey
		}
		at, id = &t, &before[1]
	}
	return keyset(ctx, s, limit, scanRunRow, RunKey, `SELECT `+runColumns+`, ($4 = '' OR permissioned_as = $4) AND (NOT $5 OR finished_at IS NULL)
FROM run WHERE workspace_id = $1 AND ($2::timestamptz IS NULL OR (created_at, job_id) < ($2, $3::uuid))
ORDER BY created_at DESC, job_id DESC LIMIT $6`, ws, at, id, permissionedAs, runningOnly)
}

// ErrBadKey is a page key that is not one this store gave (a forged page token).
var ErrBadKey = errors.New("store: not a page key of this list")

const tokenColumns = `id, username, scopes, label, created_at, expires_at, revoked_at`

func scanToken(row pgx.CollectableRow, extra ...any) (TokenInfo, error) {
	var t TokenInfo
	return t, row.Scan(append([]any{&t.ID, &t.Username, &t.Scopes, &t.Label, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt}, extra...)...)
}

// GetToken reads a user token's metadata; with onlyUser, only if it is that member's (NotFound
// otherwise: another member's token is not even confirmed to exist).
func (s *Store) GetToken(ctx context.Context, ws, id, onlyUser string) (TokenInfo, error) {
	return one(ctx, s, "token", id, scanToken, `SELECT `+tokenColumns+` FROM token_user
WHERE workspace_id = $1 AND id = $2 AND ($3 = '' OR username = $3)`, ws, id, onlyUser)
}

// ListTokens reads ws's user tokens after id `after`, by id: of username ("" any), and revoked
// or expired ones only if asked.
func (s *Store) ListTokens(ctx context.Context, ws, username string, inactive bool, after string, limit int) ([]TokenInfo, []string, error) {
	return keyset(ctx, s, limit, scanToken, func(t TokenInfo) []string { return []string{t.ID} },
		`SELECT `+tokenColumns+`, ($3 = '' OR username = $3) AND ($4 OR (revoked_at IS NULL AND expires_at > now())) FROM token_user
WHERE workspace_id = $1 AND id > $2 ORDER BY id LIMIT $5`, ws, after, username, inactive)
}
