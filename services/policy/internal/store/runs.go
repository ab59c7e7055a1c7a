package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/millwright/millwright/services/policy/internal/policy"
)

// Run is a recorded run identity.
type Run struct {
	Workspace      string
	JobID          string
	PermissionedAs string
	Origin         policy.Origin
	Viewer         *string // nil: no viewer
	ParentJobID    string
	TokenID        string
	CreatedAt      time.Time
	FinishedAt     *time.Time
}

// NewRun is what RecordRun needs. There is no viewer field: RecordRun computes it.
type NewRun struct {
	Workspace      string
	JobID          string
	PermissionedAs string // for job_token origin: "" takes the parent's
	Origin         policy.Origin
	// CredentialDigest is the digest of the credential that proves who started the run: a
	// user token (app_session, direct, preview) or the parent's job token (job_token); nil for
	// the origins without a viewer.
	CredentialDigest []byte
	// The new job token.
	TokenID     string
	TokenDigest []byte
	ExpiresAt   time.Time
}

// RecordRun records a starting run and its job token in one transaction. The viewer is
// decided here and only here, from the origin: the email of the enabled member the user
// credential authenticates, the viewer recorded for the live run the job credential belongs
// to, or none. The credential is authenticated in the same transaction (FOR SHARE), so a
// concurrent revoke or FinishRun of the parent cannot slip between the check and the insert.
func (s *Store) RecordRun(ctx context.Context, n NewRun) (Run, error) {
	src, ok := policy.ViewerSourceOf(n.Origin)
	if !ok {
		return Run{}, fmt.Errorf("unknown origin %q", n.Origin)
	}
	var run Run
	err := s.inTx(ctx, readWrite, func(tx pgx.Tx) error {
		if err := workspaceExists(ctx, tx, n.Workspace); err != nil {
			return err
		}
		run = Run{Workspace: n.Workspace, JobID: n.JobID, PermissionedAs: n.PermissionedAs, Origin: n.Origin, TokenID: n.TokenID}
		switch src {
		case policy.ViewerNone:
			if n.CredentialDigest != nil {
				return policy.ErrCredentialUnused
			}
		case policy.ViewerUser:
			if n.CredentialDigest == nil {
				return policy.ErrCredentialNeeded
			}
			id, err := authenticate(ctx, tx, n.CredentialDigest, true)
			if err != nil {
				return err
			}
			if id.Kind != TokenUser {
				return policy.ErrBadCredential
			}
			if id.Workspace != n.Workspace {
				return policy.ErrWrongWorkspace
			}
			email := id.Email
			run.Viewer = &email
		case policy.ViewerParent:
			if n.CredentialDigest == nil {
				return policy.ErrCredentialNeeded
			}
			id, err := authenticate(ctx, tx, n.CredentialDigest, true)
			if err != nil {
				return err
			}
			if id.Kind != TokenJob {
				return policy.ErrBadCredential
			}
			if id.Workspace != n.Workspace {
				return policy.ErrWrongWorkspace
			}
			parent, err := runByID(ctx, tx, id.JobID)
			if err != nil {
				return err
			}
			run.Viewer = parent.Viewer
			run.ParentJobID = parent.JobID
			switch run.PermissionedAs {
			case "":
				run.PermissionedAs = parent.PermissionedAs
			case parent.PermissionedAs:
			default:
				return policy.ErrPermissionedAs
			}
		}
		if run.PermissionedAs == "" {
			return policy.ErrPermissionedAs
		}
		var parent *string
		if run.ParentJobID != "" {
			parent = &run.ParentJobID
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO run (job_id, workspace_id, permissioned_as, origin, viewer_email, parent_job_id, token_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`,
			run.JobID, run.Workspace, run.PermissionedAs, string(run.Origin), run.Viewer, parent, run.TokenID).Scan(&run.CreatedAt)
		if isUnique(err, "run_pkey") {
			return policy.ErrAlreadyExists
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO token (id, digest, kind, workspace_id, job_id, expires_at) VALUES ($1, $2, 'job', $3, $4, $5)`,
			n.TokenID, n.TokenDigest, n.Workspace, n.JobID, n.ExpiresAt)
		return err
	})
	return run, err
}

const runColumns = `job_id::text, workspace_id, permissioned_as, origin, viewer_email, coalesce(parent_job_id::text, ''), token_id, created_at, finished_at`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var origin string
	err := row.Scan(&r.JobID, &r.Workspace, &r.PermissionedAs, &origin, &r.Viewer, &r.ParentJobID, &r.TokenID, &r.CreatedAt, &r.FinishedAt)
	r.Origin = policy.Origin(origin)
	return r, err
}

func runByID(ctx context.Context, q rowQuerier, jobID string) (Run, error) {
	r, err := scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM run WHERE job_id = $1`, jobID))
	if errNoRows(err) {
		return Run{}, policy.NotFound("run", jobID)
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
			return policy.ErrBadCredential
		}
		run, err = runByID(ctx, tx, id.JobID)
		return err
	})
	return run, err
}

// finishRunSQL finishes a run and revokes its job token in one statement (one round trip, one
// implicit transaction; events "run" and "token"). Both UPDATEs see the same snapshot and
// re-check their row after waiting for a concurrent writer, so two racing calls finish and
// revoke once. It answers whether the run exists in that workspace.
const finishRunSQL = `
WITH r AS (
    SELECT token_id FROM run WHERE job_id = $1 AND workspace_id = $2
), fr AS (
    UPDATE run SET finished_at = now() WHERE job_id = $1 AND workspace_id = $2 AND finished_at IS NULL
), ft AS (
    UPDATE token SET revoked_at = now() WHERE id = (SELECT token_id FROM r) AND revoked_at IS NULL
)
SELECT EXISTS (SELECT 1 FROM r)`

// FinishRun marks a run finished and revokes its job token atomically (events "run" and
// "token"). Finishing a finished run succeeds and changes nothing.
func (s *Store) FinishRun(ctx context.Context, ws, jobID string) error {
	var found bool
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, finishRunSQL, jobID, ws).Scan(&found)
	})
	if err != nil {
		return err
	}
	if !found {
		return policy.NotFound("run", jobID)
	}
	return nil
}
