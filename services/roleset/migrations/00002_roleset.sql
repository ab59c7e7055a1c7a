-- +goose Up

-- A target cluster this instance manages roles on. admin_password_enc is AES-GCM (pkg secret)
-- bound to "cluster:<id>"; it never reaches the stream (triggers list columns).
CREATE TABLE cluster (
    id                 text        PRIMARY KEY,
    host               text        NOT NULL,
    port               integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    maintenance_db     text        NOT NULL,
    admin_user         text        NOT NULL,
    admin_password_enc bytea       NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER cluster_stream AFTER INSERT OR UPDATE OR DELETE ON cluster
    FOR EACH ROW EXECUTE FUNCTION stream_emit('cluster', '', 'id', 'host', 'port');

-- The role catalog. state: creating (row first, then CREATE ROLE, then ready: a crash leaves a
-- row a retry resumes), ready, deleting (retire and drop in progress; the reconciler resumes).
-- oid is the role's oid on the cluster, stable across renames: the set-login hash uses it.
CREATE TABLE datatable_role (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id   text        NOT NULL REFERENCES cluster (id),
    name         text        NOT NULL,
    enabled      boolean     NOT NULL DEFAULT true,
    state        text        NOT NULL DEFAULT 'creating' CHECK (state IN ('creating', 'ready', 'deleting')),
    oid          bigint,
    password_enc bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster_id, name),
    CHECK (state <> 'ready' OR (oid IS NOT NULL AND password_enc IS NOT NULL))
);
CREATE TRIGGER datatable_role_stream AFTER INSERT OR UPDATE OR DELETE ON datatable_role
    FOR EACH ROW EXECUTE FUNCTION stream_emit('role', '', 'id', 'cluster_id', 'name', 'enabled', 'state', 'oid');

-- A workspace's data table. roles: {"<role id>" | "admin": ["u/alice", "g/x", "f/y", "*"]}.
-- default_role: a role id, 'admin' or '$none'.
CREATE TABLE datatable (
    workspace          text        NOT NULL,
    name               text        NOT NULL,
    cluster_id         text        NOT NULL REFERENCES cluster (id),
    database           text        NOT NULL,
    admin_user         text        NOT NULL,
    admin_password_enc bytea       NOT NULL,
    default_role       text        NOT NULL,
    roles              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, name)
);
CREATE TRIGGER datatable_stream AFTER INSERT OR UPDATE OR DELETE ON datatable
    FOR EACH ROW EXECUTE FUNCTION stream_emit('datatable', 'workspace', 'name', 'cluster_id', 'database', 'default_role');

-- Role-set logins (wm_set_<hash>). A row always names a login that can authenticate with the
-- password it holds: written after the login's CREATE/ALTER committed, deleted in its own
-- commit before the login is made NOLOGIN or dropped. role_ids and oids are sorted.
CREATE TABLE datatable_role_set (
    cluster_id   text        NOT NULL REFERENCES cluster (id),
    login        text        NOT NULL,
    instance_id  text        NOT NULL,
    role_ids     bigint[]    NOT NULL,
    oids         bigint[]    NOT NULL,
    password_enc bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, login)
);
CREATE INDEX datatable_role_set_role_ids_idx ON datatable_role_set USING gin (role_ids);
CREATE INDEX datatable_role_set_last_used_idx ON datatable_role_set (instance_id, last_used_at);
-- Only a removal matters to caches ("login retired"); creation and last_used_at writes emit
-- nothing, so the cold path does not flush every replica's cache.
CREATE TRIGGER datatable_role_set_stream AFTER DELETE ON datatable_role_set
    FOR EACH ROW EXECUTE FUNCTION stream_emit('login', '', 'login', 'cluster_id', 'role_ids');

-- The retire journal: written in the same commit that deletes a datatable_role_set row, deleted
-- once the login is dropped. A crash mid-retire leaves an entry the reconciler finishes, so a
-- login that lost its row never stays LOGIN with a password someone was once given.
CREATE TABLE datatable_role_set_retiring (
    cluster_id  text        NOT NULL REFERENCES cluster (id),
    login       text        NOT NULL,
    instance_id text        NOT NULL,
    reason      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, login)
);

-- +goose Down
DROP TABLE datatable_role_set_retiring;
DROP TABLE datatable_role_set;
DROP TABLE datatable;
DROP TABLE datatable_role;
DROP TABLE cluster;
