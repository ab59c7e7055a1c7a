-- +goose Up
-- Retention of runs and tokens (docs/policy.md, "Retention"). At platform scale every job adds
-- a run row and a job token row, and neither was ever removed. Removing them must cost O(1) per
-- period, not a DELETE over millions of rows, so both become time-partitioned tables and old
-- partitions are detached and dropped by the service's maintenance loop (store.Maintain), which
-- also creates the partitions ahead of time:
--
--   run        PARTITION BY RANGE (created_at): one partition per week (Monday 00:00 UTC),
--                run_pYYYYMMDD after its first day
--   token      PARTITION BY LIST (kind)
--     token_user   a plain table: user tokens are few and long-lived (up to 366 days); dead
--                  ones are deleted by an indexed DELETE (which emits their stream events)
--     token_job    PARTITION BY RANGE (created_at): token_job_pYYYYMMDD, the same ranges,
--                  dropped with the runs recorded with them (a job token lives at most the job
--                  token TTL, which the run retention must exceed)
--
-- The SQL that reads and writes these tables is unchanged: the partitions are found by the
-- planner. Primary keys of partitioned tables must include the partition key, so run's is
-- (job_id, created_at) and token's (id, kind, created_at); what the old keys guaranteed is kept:
--   - a job id names one run among the retained runs: run_job_id_unique (below), serialized
--     per job id by an advisory lock, refuses a second run with the same job id as the old
--     primary key did (same error, same constraint name "run_pkey");
--   - user tokens keep UNIQUE (id) and UNIQUE (digest) on token_user; job token ids and digests
--     are 96 and 256 random bits drawn per token, indexed but not declared unique across partitions.
--
-- Existing rows are kept, not copied: the old run table becomes the partition run_legacy, the
-- old token table (its user tokens moved to token_user) the partition token_job_legacy, both
-- covering everything before the start of the UTC day after the newest row (or today). They are
-- dropped like any other partition once that bound is older than the retention. On a database
-- with no run and no job token the legacy tables are simply dropped.

-- Free the old names (index names are schema-wide) and stop the old triggers: rows moved below
-- must not emit events (nothing about them changes for a cache).
ALTER TABLE run RENAME TO run_legacy;
ALTER INDEX run_pkey RENAME TO run_legacy_pkey;
DROP TRIGGER run_stream ON run_legacy;
DROP TRIGGER run_stream_update ON run_legacy;
DROP TRIGGER run_identity_immutable ON run_legacy;
-- ATTACH matches CHECK constraints by name, and new unnamed ones would be numbered past the
-- old ones: name them.
ALTER TABLE run_legacy RENAME CONSTRAINT run_check TO run_viewer_check;
ALTER TABLE run_legacy RENAME CONSTRAINT run_check1 TO run_no_viewer_check;
ALTER TABLE run_legacy RENAME CONSTRAINT run_check2 TO run_parent_check;

ALTER TABLE token RENAME TO token_legacy;
ALTER INDEX token_pkey RENAME TO token_legacy_pkey;
ALTER INDEX token_digest_key RENAME TO token_legacy_digest_key;
ALTER INDEX token_member_idx RENAME TO token_legacy_member_idx;
ALTER INDEX token_job_idx RENAME TO token_legacy_job_idx;
DROP TRIGGER token_stream ON token_legacy;
DROP TRIGGER token_stream_update ON token_legacy;
ALTER TABLE token_legacy RENAME CONSTRAINT token_check TO token_user_name_check;
ALTER TABLE token_legacy RENAME CONSTRAINT token_check1 TO token_job_id_check;

-- Runs (Windmill's job_perms): the identity recorded when a run starts. viewer_email is set by
-- RecordRun from the origin and an authenticated credential, and never changed afterwards.
CREATE TABLE run (
    job_id          uuid        NOT NULL,
    workspace_id    text        NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    permissioned_as text        NOT NULL,
    origin          text        NOT NULL CONSTRAINT run_origin_check CHECK (origin IN ('app_session', 'app_anonymous', 'direct', 'preview',
                                                           'job_token', 'schedule', 'trigger', 'ai_tool')),
    viewer_email    text,
    parent_job_id   uuid,
    token_id        text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    PRIMARY KEY (job_id, created_at),
    CONSTRAINT run_viewer_check CHECK (origin NOT IN ('app_session', 'direct', 'preview') OR viewer_email IS NOT NULL),
    CONSTRAINT run_no_viewer_check CHECK (origin NOT IN ('app_anonymous', 'schedule', 'trigger', 'ai_tool') OR viewer_email IS NULL),
    CONSTRAINT run_parent_check CHECK ((origin = 'job_token') = (parent_job_id IS NOT NULL))
) PARTITION BY RANGE (created_at);

-- Tokens: only the sha256 digest of the secret is stored. User tokens name a member, job tokens
-- a run.
CREATE TABLE token (
    id           text        NOT NULL,
    digest       bytea       NOT NULL CONSTRAINT token_digest_check CHECK (length(digest) = 32),
    kind         text        NOT NULL CONSTRAINT token_kind_check CHECK (kind IN ('user', 'job')),
    workspace_id text        NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    username     text,
    job_id       uuid,
    scopes       text[]      NOT NULL DEFAULT '{}',
    label        text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    PRIMARY KEY (id, kind, created_at),
    CONSTRAINT token_user_name_check CHECK ((kind = 'user') = (username IS NOT NULL)),
    CONSTRAINT token_job_id_check CHECK ((kind = 'job') = (job_id IS NOT NULL))
) PARTITION BY LIST (kind);

CREATE TABLE token_user PARTITION OF token FOR VALUES IN ('user');
ALTER TABLE token_user ADD CONSTRAINT token_user_id_key UNIQUE (id),
                       ADD CONSTRAINT token_user_digest_key UNIQUE (digest);
CREATE INDEX token_user_member_idx ON token_user (workspace_id, username) WHERE revoked_at IS NULL;
-- When a user token stopped authenticating (revoked or expired; least() ignores a NULL
-- revoked_at): what Maintain deletes by.
CREATE INDEX token_user_dead_idx ON token_user ((least(revoked_at, expires_at)));

CREATE TABLE token_job PARTITION OF token FOR VALUES IN ('job') PARTITION BY RANGE (created_at);
CREATE INDEX token_job_digest_idx ON token_job (digest);
CREATE INDEX token_job_job_idx ON token_job (job_id);

-- Keep the existing rows. User tokens move (few rows); the rest of the old tables are attached
-- in place (the attach checks the bound and builds the new primary key index, no copy).
INSERT INTO token_user SELECT id, digest, kind, workspace_id, username, job_id, scopes, label, created_at, expires_at, revoked_at
FROM token_legacy WHERE kind = 'user';
DELETE FROM token_legacy WHERE kind = 'user';
-- A partition has one primary key, its parent's (it leads with the same column, so lookups
-- by job id and token id stay indexed).
ALTER TABLE run_legacy DROP CONSTRAINT run_legacy_pkey;
ALTER TABLE token_legacy DROP CONSTRAINT token_legacy_pkey;
ALTER TABLE token_legacy DROP CONSTRAINT token_legacy_digest_key;
DROP INDEX token_legacy_member_idx, token_legacy_job_idx;

-- +goose StatementBegin
DO $$
DECLARE
    today timestamptz := date_trunc('day', now(), 'UTC');
    bound timestamptz;
    d     timestamptz;
    next  timestamptz;
BEGIN
    -- The start of the UTC day after the newest legacy row, and at least tomorrow: rows
    -- recorded during the migration still fall into the legacy partitions.
    bound := greatest(today,
                      date_trunc('day', (SELECT max(created_at) FROM run_legacy), 'UTC'),
                      date_trunc('day', (SELECT max(created_at) FROM token_legacy), 'UTC'))
             + interval '1 day';
    IF EXISTS (SELECT 1 FROM run_legacy) OR EXISTS (SELECT 1 FROM token_legacy) THEN
        EXECUTE format('ALTER TABLE run ATTACH PARTITION run_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
        EXECUTE format('ALTER TABLE token_job ATTACH PARTITION token_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
        ALTER TABLE token_legacy RENAME TO token_job_legacy;
        d := bound;
    ELSE
        DROP TABLE run_legacy, token_legacy;
        d := today;
    END IF;
    -- Partitions up to at least a week ahead, ending on Mondays 00:00 UTC (the maintenance
    -- loop's weekly boundaries): the first one up to the next Monday, then whole weeks.
    WHILE d < today + interval '8 days' LOOP
        next := date_trunc('week', d, 'UTC') + interval '7 days';
        EXECUTE format('CREATE TABLE %I PARTITION OF run FOR VALUES FROM (%L) TO (%L)',
                       'run_p' || to_char(d AT TIME ZONE 'UTC', 'YYYYMMDD'), d, next);
        EXECUTE format('CREATE TABLE %I PARTITION OF token_job FOR VALUES FROM (%L) TO (%L)',
                       'token_job_p' || to_char(d AT TIME ZONE 'UTC', 'YYYYMMDD'), d, next);
        d := next;
    END LOOP;
END $$;
-- +goose StatementEnd

CREATE TRIGGER token_stream AFTER DELETE ON token
    FOR EACH ROW EXECUTE FUNCTION stream_emit('token', 'workspace_id', 'id', 'kind', 'username', 'job_id', 'revoked_at');
CREATE TRIGGER token_stream_update AFTER UPDATE ON token
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('token', 'workspace_id', 'id', 'kind', 'username', 'job_id', 'revoked_at');

CREATE TRIGGER run_stream AFTER INSERT OR DELETE ON run
    FOR EACH ROW EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');
CREATE TRIGGER run_stream_update AFTER UPDATE ON run
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');
CREATE TRIGGER run_identity_immutable BEFORE UPDATE ON run
    FOR EACH ROW EXECUTE FUNCTION run_identity_immutable();

-- +goose StatementBegin
-- One run per job id among the retained runs (the old PRIMARY KEY (job_id)): a job token names
-- its run by job id, so a second run under the same id would make a token's identity ambiguous.
-- The lock (two-key form, its own space; first key "run" in ASCII) serializes inserts of one
-- job id; in READ COMMITTED each statement below sees what the previous holder committed.
-- Costs one index probe per retained partition (docs/policy.md, "Retention", measured); the
-- generic plan is made once per session, where the service's pool default (force_custom_plan)
-- would plan the lookup over every partition on each insert.
CREATE FUNCTION run_job_id_unique() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7501166, hashtext(NEW.job_id::text));
    IF EXISTS (SELECT 1 FROM run WHERE job_id = NEW.job_id) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "run_pkey"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'run_pkey',
                  DETAIL = format('Key (job_id)=(%s) already exists.', NEW.job_id);
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER run_job_id_unique BEFORE INSERT ON run
    FOR EACH ROW EXECUTE FUNCTION run_job_id_unique();

-- +goose Down
-- Back to plain tables, keeping every row (the copies fire no stream trigger: none exists yet).
-- The constraints get version 6's generated names, spelled out (generated ones would be
-- numbered past the partitioned tables' while those exist), so that Up runs again.
ALTER TABLE run RENAME TO run_partitioned;
ALTER TABLE token RENAME TO token_partitioned;
ALTER INDEX run_pkey RENAME TO run_partitioned_pkey;
ALTER INDEX token_pkey RENAME TO token_partitioned_pkey;
CREATE TABLE token (
    id           text        PRIMARY KEY,
    digest       bytea       NOT NULL UNIQUE CONSTRAINT token_digest_check CHECK (length(digest) = 32),
    kind         text        NOT NULL CONSTRAINT token_kind_check CHECK (kind IN ('user', 'job')),
    workspace_id text        NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    username     text,
    job_id       uuid,
    scopes       text[]      NOT NULL DEFAULT '{}',
    label        text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    CONSTRAINT token_check CHECK ((kind = 'user') = (username IS NOT NULL)),
    CONSTRAINT token_check1 CHECK ((kind = 'job') = (job_id IS NOT NULL))
);
INSERT INTO token SELECT * FROM token_partitioned;
CREATE INDEX token_member_idx ON token (workspace_id, username) WHERE revoked_at IS NULL;
CREATE INDEX token_job_idx ON token (job_id) WHERE job_id IS NOT NULL;
CREATE TRIGGER token_stream AFTER DELETE ON token
    FOR EACH ROW EXECUTE FUNCTION stream_emit('token', 'workspace_id', 'id', 'kind', 'username', 'job_id', 'revoked_at');
CREATE TRIGGER token_stream_update AFTER UPDATE ON token
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('token', 'workspace_id', 'id', 'kind', 'username', 'job_id', 'revoked_at');
CREATE TABLE run (
    job_id          uuid        PRIMARY KEY,
    workspace_id    text        NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    permissioned_as text        NOT NULL,
    origin          text        NOT NULL CONSTRAINT run_origin_check CHECK (origin IN ('app_session', 'app_anonymous', 'direct', 'preview',
                                                           'job_token', 'schedule', 'trigger', 'ai_tool')),
    viewer_email    text,
    parent_job_id   uuid,
    token_id        text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CONSTRAINT run_check CHECK (origin NOT IN ('app_session', 'direct', 'preview') OR viewer_email IS NOT NULL),
    CONSTRAINT run_check1 CHECK (origin NOT IN ('app_anonymous', 'schedule', 'trigger', 'ai_tool') OR viewer_email IS NULL),
    CONSTRAINT run_check2 CHECK ((origin = 'job_token') = (parent_job_id IS NOT NULL))
);
INSERT INTO run SELECT * FROM run_partitioned;
CREATE TRIGGER run_stream AFTER INSERT OR DELETE ON run
    FOR EACH ROW EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');
CREATE TRIGGER run_stream_update AFTER UPDATE ON run
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');
CREATE TRIGGER run_identity_immutable BEFORE UPDATE ON run
    FOR EACH ROW EXECUTE FUNCTION run_identity_immutable();
DROP TABLE run_partitioned, token_partitioned;
DROP FUNCTION run_job_id_unique();
