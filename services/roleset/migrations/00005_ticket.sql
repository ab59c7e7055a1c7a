-- +goose Up

-- Run-scoped tickets (issue 14): the credential a job presents to roleset's PostgreSQL proxy
-- (user = id, password = a secret only the job holds) instead of a login's long-lived password.
-- Tickets live here, not in a replica's memory, so any replica's proxy serves any ticket and a
-- restarted proxy accepts the tickets of live runs again. verifier is the SCRAM-SHA-256 verifier
-- of the secret (Postgres's text form), never the secret: the proxy checks a client's SCRAM
-- proof against it, and a copy of this table logs no one in. The rest is the binding: the run
-- (workspace, job_id), the data table, and the decision (login, role_ids, sorted). A ticket
-- authenticates while revoked_at IS NULL and now() < expires_at (the database's clock, so
-- replicas' clocks do not matter).
CREATE TABLE ticket (
    id         text        PRIMARY KEY,
    verifier   text        NOT NULL,
    workspace  text        NOT NULL,
    job_id     text        NOT NULL,
    datatable  text        NOT NULL,
    login      text        NOT NULL,
    role_ids   bigint[]    NOT NULL,
    -- The data-table reference the ticket was resolved for, and the run's job token encrypted
    -- under the key ring (AAD: the ticket id): with them any replica re-takes the decision
    -- when a session starts and whenever an event may have changed it, and ends the sessions
    -- of a ticket whose decision changed. Encrypted like every secret at rest.
    reference     text     NOT NULL,
    job_token_enc bytea    NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    CHECK (expires_at > created_at)
);
-- The end of a run revokes its tickets (RevokeTicketsOfRun), and a change of a data table's
-- permissions revokes the data table's (RevokeTicketsWhere); both look only at live ones.
CREATE INDEX ticket_run_idx ON ticket (workspace, job_id) WHERE revoked_at IS NULL;
CREATE INDEX ticket_datatable_idx ON ticket (workspace, datatable) WHERE revoked_at IS NULL;
-- The cleanup deletes expired tickets oldest first, in bounded batches (DeleteExpiredTickets).
CREATE INDEX ticket_expires_idx ON ticket (expires_at);

-- The proxy's cancel keys. A client's cancel request (Ctrl-C in psql) arrives on a new
-- connection, to whichever replica the load balancer picks, carrying the BackendKeyData the
-- proxy gave it: its own (proxy_pid, proxy_secret), never the upstream's. This row lets any
-- replica forward it to the upstream backend with the upstream's real pair. Written when a
-- session starts, deleted when it ends. The upstream secret is stored in clear: it only cancels
-- a running query of that one backend, and a client never sees it. bytea secrets: protocol 3.2
-- allows keys of up to 256 bytes. pids are uint32 on the wire.
CREATE TABLE proxy_cancel_key (
    proxy_pid       bigint      NOT NULL CHECK (proxy_pid BETWEEN 0 AND 4294967295),
    proxy_secret    bytea       NOT NULL CHECK (length(proxy_secret) BETWEEN 4 AND 256),
    upstream_host   text        NOT NULL,
    upstream_port   integer     NOT NULL CHECK (upstream_port BETWEEN 1 AND 65535),
    upstream_pid    bigint      NOT NULL CHECK (upstream_pid BETWEEN 0 AND 4294967295),
    upstream_secret bytea       NOT NULL CHECK (length(upstream_secret) BETWEEN 4 AND 256),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (proxy_pid, proxy_secret)
);

-- A data table's credential mode: 'direct' (the login's password, as before) or 'proxy' (a
-- ticket for roleset's proxy). Existing data tables stay direct, so their jobs keep working
-- (a job holding a direct password today would otherwise be handed a ticket for a proxy the
-- deployment may not run yet); new ones are proxy, the stronger mode.
ALTER TABLE datatable ADD COLUMN credential_mode text NOT NULL DEFAULT 'direct'
    CHECK (credential_mode IN ('direct', 'proxy'));
ALTER TABLE datatable ALTER COLUMN credential_mode SET DEFAULT 'proxy';

-- +goose Down
ALTER TABLE datatable DROP COLUMN credential_mode;
DROP TABLE proxy_cancel_key;
DROP TABLE ticket;
