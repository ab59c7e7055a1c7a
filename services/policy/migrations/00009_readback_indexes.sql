-- +goose Up
-- The read-back API (issue 17, store/readback.go) pages by key on an index whose order is the
-- page's, so a page of a small workspace never scans the rows of the others:
--   - ListRuns: a workspace's runs newest first. One more index entry per recorded run (the
--     job path; measured in docs/benchmarks.md, "Read-back").
--   - ListTokens: a workspace's user tokens by id (user tokens are not on the job path).
CREATE INDEX run_workspace_created_idx ON run (workspace_id, created_at DESC, job_id DESC);
CREATE INDEX token_user_workspace_idx ON token_user (workspace_id, id);

-- +goose Down
DROP INDEX token_user_workspace_idx;
DROP INDEX run_workspace_created_idx;
