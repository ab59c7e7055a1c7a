package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/pkg/stream"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// TokenKind is "user" or "job".
type TokenKind string

// Token kinds.
const (
	TokenUser TokenKind = "user"
	TokenJob  TokenKind = "job"
)

// UserToken describes a user token to store (its digest only).
type UserToken struct {
	ID        string
	Digest    []byte
	Workspace string
	Username  string
	Scopes    []string
	Label     string
	ExpiresAt time.Time
}

// TokenIdentity is what a live token authenticates as.
type TokenIdentity struct {
	ID        string
	Kind      TokenKind
	Workspace string
	Username  string // user tokens
	Email     string // user tokens
	Scopes    []string
	JobID     string // job tokens
	ExpiresAt time.Time
}

// CreateUserToken stores a user token for an enabled member.
func (s *Store) CreateUserToken(ctx context.Context, t UserToken) error {
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	return s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		if _, err := resolveTenancy(ctx, tx, t.Workspace, ByUsername, t.Username); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO token (id, digest, kind, workspace_id, username, scopes, label, expires_at)
			VALUES ($1, $2, 'user', $3, $4, $5, $6, $7)`,
			t.ID, t.Digest, t.Workspace, t.Username, t.Scopes, t.Label, t.ExpiresAt)
		return err
	})
}

// RevokeToken revokes a user token of workspace. With onlyUser set, the token must belong to
// that user (NotFound otherwise, so a caller cannot probe others' token ids). Revoking a
// revoked token succeeds. Job tokens are revoked by FinishRun, not here.
func (s *Store) RevokeToken(ctx context.Context, ws, id, onlyUser string) error {
	return s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		var owner string
		err := tx.QueryRow(ctx, `SELECT username FROM token WHERE id = $1 AND workspace_id = $2 AND kind = 'user' FOR UPDATE`,
			id, ws).Scan(&owner)
		if errNoRows(err) || (err == nil && onlyUser != "" && owner != onlyUser) {
			return rulebook.NotFound("token", id)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE token SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
		return err
	})
}

// Authenticate returns the identity of a live token by the digest of its secret: not revoked,
// not expired, and for a user token an enabled member, for a job token an unfinished run.
// Anything else is ErrBadCredential.
func (s *Store) Authenticate(ctx context.Context, digest []byte) (TokenIdentity, error) {
	return authenticate(ctx, s.pool, digest, false)
}

type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// authenticateSQL reads a token by digest, and whether it is live: a user token's member
// enabled, a job token's run not finished.
const authenticateSQL = `
		SELECT t.id, t.kind, t.workspace_id, coalesce(t.username, ''), coalesce(m.email, ''), t.scopes,
		       coalesce(t.job_id::text, ''), t.expires_at,
		       (t.kind = 'user' AND m.username IS NOT NULL AND NOT m.disabled)
		       OR (t.kind = 'job' AND r.job_id IS NOT NULL AND r.finished_at IS NULL)
		FROM token t
		LEFT JOIN member m ON m.workspace_id = t.workspace_id AND m.username = t.username
		LEFT JOIN run r ON r.job_id = t.job_id AND r.workspace_id = t.workspace_id
		WHERE t.digest = $1 AND t.revoked_at IS NULL AND t.expires_at > now()`

func authenticate(ctx context.Context, q rowQuerier, digest []byte, lock bool) (TokenIdentity, error) {
	var t TokenIdentity
	var kind string
	var live bool
	sql := authenticateSQL
	if lock {
		// Taken inside RecordRun: a concurrent revoke or finish waits for us, or we see it.
		sql += ` FOR SHARE OF t`
	}
	err := q.QueryRow(ctx, sql, digest).Scan(&t.ID, &kind, &t.Workspace, &t.Username, &t.Email, &t.Scopes, &t.JobID, &t.ExpiresAt, &live)
	if errNoRows(err) {
		return TokenIdentity{}, rulebook.ErrBadCredential
	}
	if err != nil {
		return TokenIdentity{}, err
	}
	if !live {
		return TokenIdentity{}, rulebook.ErrBadCredential
	}
	t.Kind = TokenKind(kind)
	return t, nil
}

// AuthenticateAt is Authenticate plus a stream position for remote caches: the head is read
// first, then the token in a snapshot taken after it, so every change to this token after the
// returned position is an event after it (one already reflected may come again). A token that
// does not authenticate is refused before the head is read: reading it waits for the commits in
// flight, and an unauthenticated caller sending made-up tokens must not make writers wait.
func (s *Store) AuthenticateAt(ctx context.Context, digest []byte) (TokenIdentity, int64, error) {
	if _, err := authenticate(ctx, s.pool, digest, false); err != nil {
		return TokenIdentity{}, 0, err
	}
	head, err := stream.Head(ctx, s.pool)
	if err != nil {
		return TokenIdentity{}, 0, err
	}
	var t TokenIdentity
	err = s.inTx(ctx, snapshot, func(tx pgx.Tx) error {
		var err error
		t, err = authenticate(ctx, tx, digest, false)
		return err
	})
	return t, head, err
}
