package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/pkg/defaults"
	"github.com/millwright/millwright/services/roleset/internal/ticket"
)

// ---- tickets ----

const ticketCols = `id, verifier, workspace, job_id, datatable, login, role_ids, reference, job_token_enc, created_at, expires_at, revoked_at`

func scanTicket(row pgx.Row) (ticket.Ticket, error) {
	var t ticket.Ticket
	var revoked *time.Time
	err := row.Scan(&t.ID, &t.Verifier, &t.Workspace, &t.JobID, &t.Datatable, &t.Login, &t.RoleIDs,
		&t.Reference, &t.TokenEnc, &t.CreatedAt, &t.ExpiresAt, &revoked)
	if revoked != nil {
		t.RevokedAt = *revoked
	}
	return t, notFound(err)
}

// CreateTicket stores a minted ticket and returns it as stored. Its lifetime (ExpiresAt -
// CreatedAt) is counted from the database's clock, the one TicketForProxy judges expiry by, so
// a replica's clock skew neither shortens nor stretches it.
func (s *Store) CreateTicket(ctx context.Context, t ticket.Ticket) (ticket.Ticket, error) {
	t, err := scanTicket(s.Pool.QueryRow(ctx, `
INSERT INTO ticket (id, verifier, workspace, job_id, datatable, login, role_ids, reference, job_token_enc, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now() + $10::interval)
RETURNING `+ticketCols,
		t.ID, t.Verifier, t.Workspace, t.JobID, t.Datatable, t.Login, t.RoleIDs, t.Reference, t.TokenEnc,
		t.ExpiresAt.Sub(t.CreatedAt)))
	if uniqueViolation(err) {
		return t, ErrAlreadyExists
	}
	return t, err
}

// TicketForProxy reads a ticket the proxy may accept: ErrNotFound unless it exists, is not
// revoked and has not expired by the database's clock. Which of those it was is not said: the
// proxy refuses them all alike.
func (s *Store) TicketForProxy(ctx context.Context, id string) (ticket.Ticket, error) {
	return scanTicket(s.Pool.QueryRow(ctx, `SELECT `+ticketCols+` FROM ticket
WHERE id = $1 AND revoked_at IS NULL AND expires_at > now()`, id))
}

// RevokeTicketsOfRun revokes the live tickets of one run (the run finished, or its token was
// revoked) and returns their ids, for the proxy to end their sessions. A job id is unique only
// within its workspace: another workspace's run with the same id is not touched.
func (s *Store) RevokeTicketsOfRun(ctx context.Context, workspace, jobID string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `UPDATE ticket SET revoked_at = now()
WHERE workspace = $1 AND job_id = $2 AND revoked_at IS NULL RETURNING id`, workspace, jobID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// RevokeTicket revokes one ticket (its decision no longer holds); false if it was not live.
func (s *Store) RevokeTicket(ctx context.Context, id string) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `UPDATE ticket SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
	return tag.RowsAffected() == 1, err
}

// RevokeTicketsWhere revokes the live tickets of a data table that match (nil: all of them),
// for a change after which their decision would not be taken again, and returns their ids. The
// tickets are read and revoked in one transaction, their rows locked, so a ticket matched is
// revoked as read.
func (s *Store) RevokeTicketsWhere(ctx context.Context, workspace, datatable string, match func(ticket.Ticket) bool) ([]string, error) {
	var revoked []string
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		live, err := collect(scanTicket)(tx.Query(ctx, `SELECT `+ticketCols+` FROM ticket
WHERE workspace = $1 AND datatable = $2 AND revoked_at IS NULL FOR UPDATE`, workspace, datatable))
		if err != nil {
			return err
		}
		var ids []string
		for _, t := range live {
			if match == nil || match(t) {
				ids = append(ids, t.ID)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, `UPDATE ticket SET revoked_at = now() WHERE id = ANY($1) RETURNING id`, ids)
		if err != nil {
			return err
		}
		revoked, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return revoked, err
}

// DefaultTicketBatch is how many tickets one DeleteExpiredTickets removes when the caller
// does not say: a short transaction that holds few row locks.
const DefaultTicketBatch = 1000

// DeleteExpiredTickets deletes at most limit (DefaultTicketBatch when not positive) tickets
// that expired before before, oldest first, and reports how many. The caller repeats while a
// call deletes a full batch: no one call holds a long transaction, however many expired at once.
// Rows another replica's cleanup is deleting are skipped, not waited for.
func (s *Store) DeleteExpiredTickets(ctx context.Context, before time.Time, limit int) (int64, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM ticket WHERE id IN (
    SELECT id FROM ticket WHERE expires_at < $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		before, defaults.Positive(limit, DefaultTicketBatch))
	return tag.RowsAffected(), err
}

// ---- proxy cancel keys ----

// CancelKey maps the BackendKeyData the proxy gave a client to the upstream backend's, so any
// replica can forward the client's cancel request.
type CancelKey struct {
	ProxyPID       uint32
	ProxySecret    []byte
	UpstreamHost   string
	UpstreamPort   int
	UpstreamPID    uint32
	UpstreamSecret []byte
	CreatedAt      time.Time
}

// PutCancelKey records a session's cancel key. ErrAlreadyExists: the (pid, secret) pair is
// taken; the proxy draws another.
func (s *Store) PutCancelKey(ctx context.Context, k CancelKey) error {
	_, err := s.Pool.Exec(ctx, `
INSERT INTO proxy_cancel_key (proxy_pid, proxy_secret, upstream_host, upstream_port, upstream_pid, upstream_secret)
VALUES ($1, $2, $3, $4, $5, $6)`, k.ProxyPID, k.ProxySecret, k.UpstreamHost, k.UpstreamPort, k.UpstreamPID, k.UpstreamSecret)
	if uniqueViolation(err) {
		return ErrAlreadyExists
	}
	return err
}

// GetCancelKey reads the cancel key of a proxy (pid, secret) pair, or ErrNotFound.
func (s *Store) GetCancelKey(ctx context.Context, proxyPID uint32, proxySecret []byte) (CancelKey, error) {
	var k CancelKey
	err := s.Pool.QueryRow(ctx, `
SELECT proxy_pid, proxy_secret, upstream_host, upstream_port, upstream_pid, upstream_secret, created_at
FROM proxy_cancel_key WHERE proxy_pid = $1 AND proxy_secret = $2`, proxyPID, proxySecret).Scan(
		&k.ProxyPID, &k.ProxySecret, &k.UpstreamHost, &k.UpstreamPort, &k.UpstreamPID, &k.UpstreamSecret, &k.CreatedAt)
	return k, notFound(err)
}

// DeleteCancelKey forgets a session's cancel key when the session ends (nothing if none).
func (s *Store) DeleteCancelKey(ctx context.Context, proxyPID uint32, proxySecret []byte) error {
	_, err := s.Pool.Exec(ctx, `DELETE FROM proxy_cancel_key WHERE proxy_pid = $1 AND proxy_secret = $2`, proxyPID, proxySecret)
	return err
}
