-- +goose Up
-- The policy service's schema. Every table a cache depends on carries a trigger feeding the
-- invalidation stream (pkg/stream's stream_emit), so no code path can change it silently. Only
-- listed columns reach the payload: token digests never do.

CREATE TABLE workspace (
    id         text PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE member (
    workspace_id text    NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    username     text    NOT NULL,
    email        text    NOT NULL,
    role         text    NOT NULL CHECK (role IN ('admin', 'developer', 'operator')),
    disabled     boolean NOT NULL DEFAULT false,
    PRIMARY KEY (workspace_id, username),
    UNIQUE (workspace_id, email)
);
CREATE TRIGGER member_stream AFTER INSERT OR DELETE ON member
    FOR EACH ROW EXECUTE FUNCTION stream_emit('member', 'workspace_id', 'username', 'email', 'role', 'disabled');
CREATE TRIGGER member_stream_update AFTER UPDATE ON member
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('member', 'workspace_id', 'username', 'email', 'role', 'disabled');

CREATE TABLE workspace_group (
    workspace_id text   NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name         text   NOT NULL,
    members      text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (workspace_id, name)
);
CREATE INDEX workspace_group_members_idx ON workspace_group USING gin (members);
CREATE TRIGGER group_stream AFTER INSERT OR DELETE ON workspace_group
    FOR EACH ROW EXECUTE FUNCTION stream_emit('group', 'workspace_id', 'name', 'members');
CREATE TRIGGER group_stream_update AFTER UPDATE ON workspace_group
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('group', 'workspace_id', 'name', 'members');

-- Principals are 'u/<username>' or 'g/<group>'.
CREATE TABLE folder (
    workspace_id text   NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    name         text   NOT NULL,
    owners       text[] NOT NULL DEFAULT '{}',
    readers      text[] NOT NULL DEFAULT '{}',
    writers      text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (workspace_id, name)
);
CREATE TRIGGER folder_stream AFTER INSERT OR DELETE ON folder
    FOR EACH ROW EXECUTE FUNCTION stream_emit('folder', 'workspace_id', 'name', 'owners', 'readers', 'writers');
CREATE TRIGGER folder_stream_update AFTER UPDATE ON folder
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('folder', 'workspace_id', 'name', 'owners', 'readers', 'writers');

-- The runnable catalog: one table for scripts, flows and apps, so that one row-level-security
-- policy is the whole read rule. extra_perms is Windmill's shape: {"u/alice": true (write),
-- "g/analysts": false (read)}.
CREATE TABLE catalog_item (
    workspace_id text  NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    kind         text  NOT NULL CHECK (kind IN ('script', 'flow', 'app')),
    path         text  NOT NULL,
    latest_hash  text,
    on_behalf_of text  NOT NULL DEFAULT '',
    extra_perms  jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(extra_perms) = 'object'),
    PRIMARY KEY (workspace_id, kind, path),
    CHECK ((kind = 'script') = (latest_hash IS NOT NULL))
);
CREATE TRIGGER catalog_stream AFTER INSERT OR UPDATE OR DELETE ON catalog_item
    FOR EACH ROW EXECUTE FUNCTION stream_emit('catalog', 'workspace_id', 'path', 'kind', 'latest_hash', 'on_behalf_of');

-- Every version of every script. A hash belongs to one path in a workspace (a hash-pinned step
-- is dispatched by the hash alone), so (path, hash) pins are checked against this table.
CREATE TABLE script_version (
    workspace_id text NOT NULL,
    kind         text NOT NULL DEFAULT 'script' CHECK (kind = 'script'),
    path         text NOT NULL,
    hash         text NOT NULL CHECK (hash ~ '^[0-9a-f]{16}$'),
    PRIMARY KEY (workspace_id, path, hash),
    UNIQUE (workspace_id, hash),
    FOREIGN KEY (workspace_id, kind, path) REFERENCES catalog_item (workspace_id, kind, path) ON DELETE CASCADE
);

CREATE TABLE worker_tag (
    workspace_id text    NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    tag          text    NOT NULL,
    privileged   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (workspace_id, tag)
);
CREATE TRIGGER tag_stream AFTER INSERT OR DELETE ON worker_tag
    FOR EACH ROW EXECUTE FUNCTION stream_emit('tag', 'workspace_id', 'tag', 'privileged');
CREATE TRIGGER tag_stream_update AFTER UPDATE ON worker_tag
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('tag', 'workspace_id', 'tag', 'privileged');

-- Tokens: only the sha256 digest of the secret is stored. User tokens name a member, job tokens
-- a run.
CREATE TABLE token (
    id           text        PRIMARY KEY,
    digest       bytea       NOT NULL UNIQUE CHECK (length(digest) = 32),
    kind         text        NOT NULL CHECK (kind IN ('user', 'job')),
    workspace_id text        NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    username     text,
    job_id       uuid,
    scopes       text[]      NOT NULL DEFAULT '{}',
    label        text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    CHECK ((kind = 'user') = (username IS NOT NULL)),
    CHECK ((kind = 'job') = (job_id IS NOT NULL))
);
CREATE INDEX token_member_idx ON token (workspace_id, username) WHERE revoked_at IS NULL;
CREATE INDEX token_job_idx ON token (job_id) WHERE job_id IS NOT NULL;
-- Creating a token invalidates nothing; revoking or deleting one must reach every cache.
CREATE TRIGGER token_stream AFTER DELETE ON token
    FOR EACH ROW EXECUTE FUNCTION stream_emit('token', 'workspace_id', 'id', 'kind', 'username', 'job_id', 'revoked_at');
CREATE TRIGGER token_stream_update AFTER UPDATE ON token
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('token', 'workspace_id', 'id', 'kind', 'username', 'job_id', 'revoked_at');

-- Runs (Windmill's job_perms): the identity recorded when a run starts. viewer_email is set by
-- RecordRun from the origin and an authenticated credential, and never changed afterwards.
CREATE TABLE run (
    job_id          uuid        PRIMARY KEY,
    workspace_id    text        NOT NULL REFERENCES workspace (id) ON DELETE CASCADE,
    permissioned_as text        NOT NULL,
    origin          text        NOT NULL CHECK (origin IN ('app_session', 'app_anonymous', 'direct', 'preview',
                                                           'job_token', 'schedule', 'trigger', 'ai_tool')),
    viewer_email    text,
    parent_job_id   uuid,
    token_id        text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CHECK (origin NOT IN ('app_session', 'direct', 'preview') OR viewer_email IS NOT NULL),
    CHECK (origin NOT IN ('app_anonymous', 'schedule', 'trigger', 'ai_tool') OR viewer_email IS NULL),
    CHECK ((origin = 'job_token') = (parent_job_id IS NOT NULL))
);
CREATE TRIGGER run_stream AFTER INSERT OR DELETE ON run
    FOR EACH ROW EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');
CREATE TRIGGER run_stream_update AFTER UPDATE ON run
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');

-- +goose StatementBegin
CREATE FUNCTION run_identity_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.job_id, NEW.workspace_id, NEW.permissioned_as, NEW.origin, NEW.viewer_email, NEW.parent_job_id, NEW.token_id)
       IS DISTINCT FROM
       (OLD.job_id, OLD.workspace_id, OLD.permissioned_as, OLD.origin, OLD.viewer_email, OLD.parent_job_id, OLD.token_id) THEN
        RAISE EXCEPTION 'a run''s recorded identity cannot change' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER run_identity_immutable BEFORE UPDATE ON run
    FOR EACH ROW EXECUTE FUNCTION run_identity_immutable();

-- Operator settings (windmill-shapes 2.1): only keys a caller set are stored; defaults apply
-- at read time. The AFTER UPDATE OF trigger is the spec's "keep both ends": every replica drops
-- its cached builder flag when the event arrives.
CREATE TABLE workspace_settings (
    workspace_id      text  PRIMARY KEY REFERENCES workspace (id) ON DELETE CASCADE,
    operator_settings jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(operator_settings) = 'object')
);
CREATE TRIGGER operator_settings_change AFTER UPDATE OF operator_settings ON workspace_settings
    FOR EACH ROW WHEN (OLD.operator_settings IS DISTINCT FROM NEW.operator_settings)
    EXECUTE FUNCTION stream_emit('settings', 'workspace_id', 'workspace_id', 'operator_settings');
CREATE TRIGGER operator_settings_insert AFTER INSERT OR DELETE ON workspace_settings
    FOR EACH ROW EXECUTE FUNCTION stream_emit('settings', 'workspace_id', 'workspace_id', 'operator_settings');

-- Row-level security for catalog reads. Reads run as mw_policy_catalog_reader (SET LOCAL ROLE),
-- a NOLOGIN role that is subject to RLS even when the service's own login owns the tables or
-- is a superuser. The caller is set per transaction with set_config(..., true):
--   millwright.caller_workspace, millwright.caller_username, millwright.caller_admin ('true'),
--   millwright.caller_folders (readable folder names, comma separated),
--   millwright.caller_principals ('u/<user>' and 'g/<group>', comma separated).
-- Fail closed: with nothing set, the workspace and username comparisons are NULL or false,
-- so no row is visible. Names are validated to exclude commas.
-- Roles are cluster-wide and several databases may migrate at once: tolerate a concurrent
-- creator.
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mw_policy_catalog_reader') THEN
        BEGIN
            CREATE ROLE mw_policy_catalog_reader NOLOGIN NOINHERIT NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'mw_policy_catalog_reader', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT mw_policy_catalog_reader TO %I', current_user);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd

GRANT SELECT ON catalog_item TO mw_policy_catalog_reader;
ALTER TABLE catalog_item ENABLE ROW LEVEL SECURITY;

CREATE POLICY catalog_item_read ON catalog_item FOR SELECT TO mw_policy_catalog_reader
USING (
    workspace_id = current_setting('millwright.caller_workspace', true)
    AND coalesce(current_setting('millwright.caller_username', true), '') <> ''
    AND (
        -- admins read everything in their workspace
        current_setting('millwright.caller_admin', true) = 'true'
        -- u/<username>/... is its owner's
        OR (split_part(path, '/', 1) = 'u'
            AND split_part(path, '/', 2) = current_setting('millwright.caller_username', true))
        -- f/<folder>/... is readable by the folder's readers, writers and owners
        OR (split_part(path, '/', 1) = 'f'
            AND split_part(path, '/', 2) = ANY (string_to_array(current_setting('millwright.caller_folders', true), ',')))
        -- extra perms on the item grant read (false) or write (true)
        OR extra_perms ?| string_to_array(current_setting('millwright.caller_principals', true), ',')
    )
);

-- +goose Down
DROP TABLE workspace_settings, run, token, worker_tag, script_version, catalog_item, folder,
    workspace_group, member, workspace;
DROP FUNCTION run_identity_immutable();
