package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// Run is a recorded run identity.
type Run struct {
	Workspace      string
	JobID          string
	PermissionedAs string
	Origin         rulebook.Origin
	Viewer         *string // nil: no viewer
	ParentJobID    string
	TokenID        string
	CreatedAt      time.Time
	FinishedAt     *time.Time

	refused string // recordRunsSQL's reason for not recording it ("" when recorded)
}

// NewRun is what RecordRun needs. There is no viewer field: RecordRun computes it.
type NewRun struct {
	Workspace      string
	JobID          string
	PermissionedAs string // for job_token origin: "" takes the parent's
	Origin         rulebook.Origin
	// CredentialDigest is the digest of the credential that proves who started the run: a
	// user token (app_session, direct, preview) or the parent's job token (job_token); nil for
	// the origins without a viewer.
	CredentialDigest []byte
	// The new job token.
	TokenID     string
	TokenDigest []byte
	ExpiresAt   time.Time
}

// recordRunsSQL records a batch of runs and their job tokens in one statement: one round trip
// and one implicit transaction, however many runs (group commit, batch.go). Per item it
// authenticates the credential (FOR SHARE: a concurrent revoke or FinishRun of the parent
// waits for us, or we see it, as when this was a transaction of six statements), decides the
// viewer from the origin's viewer source (src: none, user or parent, decided in Go), and
// inserts the run and its token only if nothing is wrong; err names what was, in the order
// the checks were made before (workspace, credential, its workspace, permissioned_as). The
// run's stream event comes from its insert trigger. A duplicate job id fails the whole
// statement (the run_job_ids_unique trigger); the batcher then runs each item alone.
const recordRunsSQL = `
WITH req AS (
    SELECT * FROM unnest($1::int[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::bytea[], $7::text[],
                         $8::text[], $9::bytea[], $10::timestamptz[])
        AS q(i, ws, job_id, permissioned_as, origin, cred, src, token_id, token_digest, expires_at)
), c AS (
    SELECT q.i, t.kind, t.workspace_id, t.job_id, m.email,
           t.kind = 'user' AND m.username IS NOT NULL AND NOT m.disabled AS member_live
    FROM req q
    JOIN token t ON t.digest = q.cred AND t.revoked_at IS NULL AND t.expires_at > now()
    LEFT JOIN member m ON m.workspace_id = t.workspace_id AND m.username = t.username
    FOR SHARE OF t
), p AS (
    -- The parents' runs, locked: a concurrent FinishRun of a parent waits for us, or we see
    -- it finished (the lock re-checks finished_at after waiting).
    SELECT r.job_id, r.workspace_id, r.viewer_email, r.permissioned_as
    FROM run r
    WHERE r.job_id IN (SELECT job_id FROM c WHERE kind = 'job') AND r.finished_at IS NULL
    FOR SHARE OF r
), cp AS (
    SELECT c.i, c.kind, c.workspace_id, c.email, p.viewer_email AS parent_viewer,
           p.permissioned_as AS parent_pa, p.job_id AS parent_job,
           c.member_live OR (c.kind = 'job' AND p.job_id IS NOT NULL) AS live
    FROM c LEFT JOIN p ON p.job_id = c.job_id AND p.workspace_id = c.workspace_id
), d AS (
    SELECT q.*,
           CASE q.src WHEN 'user' THEN c.email WHEN 'parent' THEN c.parent_viewer END AS viewer,
           CASE WHEN q.src = 'parent' THEN c.parent_job END AS parent,
           CASE WHEN q.src = 'parent' AND q.permissioned_as = '' THEN coalesce(c.parent_pa, '') ELSE q.permissioned_as END AS pa,
           CASE
               WHEN w.id IS NULL THEN 'workspace'
               WHEN q.src = 'none' THEN NULL
               WHEN c.kind IS NULL OR NOT c.live
                    OR c.kind <> CASE q.src WHEN 'user' THEN 'user' ELSE 'job' END THEN 'credential'
               WHEN c.workspace_id <> q.ws THEN 'credential_workspace'
               WHEN q.src = 'parent' AND q.permissioned_as NOT IN ('', c.parent_pa) THEN 'permissioned_as'
           END AS err
    FROM req q LEFT JOIN workspace w ON w.id = q.ws LEFT JOIN cp c ON c.i = q.i
), ok AS (
    SELECT * FROM d WHERE err IS NULL AND pa <> ''
), ir AS (
    INSERT INTO run (job_id, workspace_id, permissioned_as, origin, viewer_email, parent_job_id, token_id)
    SELECT job_id, ws, pa, origin, viewer, parent, token_id FROM ok
    RETURNING job_id, created_at
), it AS (
    INSERT INTO token (id, digest, kind, workspace_id, job_id, expires_at)
    SELECT token_id, token_digest, 'job', ws, job_id, expires_at FROM ok
)
SELECT d.i, coalesce(d.err, CASE WHEN d.pa = '' THEN 'permissioned_as' END), d.pa, d.viewer,
       coalesce(d.parent::text, ''), ir.created_at
FROM d LEFT JOIN ir ON ir.job_id = d.job_id
ORDER BY d.i`

// RecordRun records a starting run and its job token, atomically, in one statement (batched
// with concurrent calls: recordRunsSQL). The viewer is decided here and only here, from the
// origin: the email of the enabled member the user credential authenticates, the viewer
// recorded for the live run the job credential belongs to, or none. The credential is
// authenticated in the same statement (FOR SHARE), so a concurrent revoke or FinishRun of
// the parent cannot slip between the check and the insert. The job token authenticates once
// RecordRun returns: the statement has committed.
func (s *Store) RecordRun(ctx context.Context, n NewRun) (Run, error) {
	src, ok := rulebook.ViewerSourceOf(n.Origin)
	if !ok {
		return Run{}, fmt.Errorf("unknown origin %q", n.Origin)
	}
	switch {
	case src == rulebook.ViewerNone && n.CredentialDigest != nil:
		return Run{}, rulebook.ErrCredentialUnused
	case src != rulebook.ViewerNone && n.CredentialDigest == nil:
		return Run{}, rulebook.ErrCredentialNeeded
	}
	r, err := s.records.do(ctx, n)
	if err != nil {
		return Run{}, err
	}
	if err := refusal(r); err != nil {
		return Run{}, err
	}
	return r, nil
}

// recordRuns executes recordRunsSQL for a batch.
func (s *Store) recordRuns(ctx context.Context, ns []NewRun) ([]Run, error) {
	k := len(ns)
	idx, wss, jobs, pas, origins, srcs, tids := make([]int32, k), make([]string, k), make([]string, k),
		make([]string, k), make([]string, k), make([]string, k), make([]string, k)
	creds, digests, expires := make([][]byte, k), make([][]byte, k), make([]time.Time, k)
	for i, n := range ns {
		src, _ := rulebook.ViewerSourceOf(n.Origin)
		idx[i], wss[i], jobs[i], pas[i], origins[i], tids[i] = int32(i), n.Workspace, n.JobID, n.PermissionedAs, string(n.Origin), n.TokenID
		srcs[i] = map[rulebook.ViewerSource]string{rulebook.ViewerNone: "none", rulebook.ViewerUser: "user", rulebook.ViewerParent: "parent"}[src]
		creds[i], digests[i], expires[i] = n.CredentialDigest, n.TokenDigest, n.ExpiresAt
	}
	var out []Run
	err := s.retry(ctx, func() error {
		out = make([]Run, 0, k)
		rows, err := s.jobs.Query(ctx, recordRunsSQL, idx, wss, jobs, pas, origins, creds, srcs, tids, digests, expires)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i int32
			var bad *string
			var created *time.Time
			var r Run
			if err := rows.Scan(&i, &bad, &r.PermissionedAs, &r.Viewer, &r.ParentJobID, &created); err != nil {
				return err
			}
			n := ns[i]
			r.Workspace, r.JobID, r.Origin, r.TokenID = n.Workspace, n.JobID, n.Origin, n.TokenID
			if bad == nil && created == nil {
				return fmt.Errorf("record run %s: no row inserted and no reason", n.JobID)
			}
			if created != nil {
				r.CreatedAt = *created
			}
			out = append(out, r)
			if bad != nil {
				// Not a statement error: carried per item (batch.go reads it from Run).
				out[len(out)-1].refused = *bad
			}
		}
		return rows.Err()
	})
	if isUnique(err, "run_pkey") && k == 1 {
		return nil, rulebook.ErrAlreadyExists
	}
	if err != nil {
		return nil, err
	}
	if len(out) != k {
		return nil, fmt.Errorf("record run: %d results for %d runs", len(out), k)
	}
	return out, nil
}

// refusal maps recordRunsSQL's err column to the domain error.
func refusal(r Run) error {
	switch r.refused {
	case "":
		return nil
	case "workspace":
		return rulebook.NotFound("workspace", r.Workspace)
	case "credential":
		return rulebook.ErrBadCredential
	case "credential_workspace":
		return rulebook.ErrWrongWorkspace
	case "permissioned_as":
		return rulebook.ErrPermissionedAs
	}
	return fmt.Errorf("record run %s: unknown refusal %q", r.JobID, r.refused)
}

const runColumns = `job_id::text, workspace_id, permissioned_as, origin, viewer_email, coalesce(parent_job_id::text, ''), token_id, created_at, finished_at`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var origin string
	err := row.Scan(&r.JobID, &r.Workspace, &r.PermissionedAs, &origin, &r.Viewer, &r.ParentJobID, &r.TokenID, &r.CreatedAt, &r.FinishedAt)
	r.Origin = rulebook.Origin(origin)
	return r, err
}

func runByID(ctx context.Context, q rowQuerier, jobID string) (Run, error) {
	r, err := scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM run WHERE job_id = $1`, jobID))
	if errNoRows(err) {
		return Run{}, rulebook.NotFound("run", jobID)
	}
	return r, err
}

// RunByToken returns the run a live job token is bound to (ErrBadCredential otherwise).
func (s *Store) RunByToken(ctx context.Context, digest []byte) (Run, error) {
	var run Run
	err := s.inTx(ctx, snapshot, func(tx pgx.Tx) error {
		id, err := authenticate(ctx, tx, digest, false)
		if err != nil {
			return err
		}
		if id.Kind != TokenJob {
			return rulebook.ErrBadCredential
		}
		run, err = runByID(ctx, tx, id.JobID)
		return err
	})
	return run, err
}

// finishRunsSQL finishes a batch of runs in one statement (one round trip, one implicit
// transaction). Finishing the run is what revokes its job token: a job token authenticates only
// while its run is unfinished. The statement's one "run" event per finished run comes from
// run_stream_update (migration 00008), appended at the end of the statement for the whole
// batch. The UPDATE re-checks a row after waiting for a concurrent writer, so two racing calls
// finish once. It answers, per item, whether the run exists in that workspace: a run it just
// finished is found among the updated rows, so only a run finished before (or none) is looked
// up again.
const finishRunsSQL = `
WITH req AS (
    SELECT * FROM unnest($1::int[], $2::uuid[], $3::text[]) AS q(i, job_id, ws)
), fr AS (
    UPDATE run SET finished_at = now() FROM req q
    WHERE run.job_id = q.job_id AND run.workspace_id = q.ws AND run.finished_at IS NULL
    RETURNING q.i
)
SELECT q.i, EXISTS (SELECT 1 FROM fr WHERE fr.i = q.i)
            OR EXISTS (SELECT 1 FROM run WHERE run.job_id = q.job_id AND run.workspace_id = q.ws)
FROM req q ORDER BY q.i`

type finish struct{ ws, jobID string }

// FinishRun marks a run finished, which revokes its job token (event "run"), batched with
// concurrent calls; the token is refused once FinishRun returns.
// Finishing a finished run succeeds and changes nothing.
func (s *Store) FinishRun(ctx context.Context, ws, jobID string) error {
	found, err := s.finishes.do(ctx, finish{ws, jobID})
	if err != nil {
		return err
	}
	if !found {
		return rulebook.NotFound("run", jobID)
	}
	return nil
}

func (s *Store) finishRuns(ctx context.Context, fs []finish) ([]bool, error) {
	k := len(fs)
	idx, jobs, wss := make([]int32, k), make([]string, k), make([]string, k)
	for i, f := range fs {
		idx[i], jobs[i], wss[i] = int32(i), f.jobID, f.ws
	}
	var out []bool
	err := s.retry(ctx, func() error {
		out = make([]bool, k)
		rows, err := s.jobs.Query(ctx, finishRunsSQL, idx, jobs, wss)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var i int32
			var found bool
			if err := rows.Scan(&i, &found); err != nil {
				return err
			}
			out[i] = found
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != k {
			return fmt.Errorf("finish run: %d results for %d runs", n, k)
		}
		return nil
	})
	return out, err
}
