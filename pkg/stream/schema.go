package stream

// Channel is the pg_notify channel every outbox insert announces itself on. Each service has its
// own database, so one fixed name per database is enough.
const Channel = "millwright_stream"

// SchemaSQL creates the outbox, its bookkeeping row and the trigger function that feeds it. It is
// version 1 of every service's migrations (pkg/migrate applies it), so a service's own
// migrations can attach triggers with:
//
//	CREATE TRIGGER member_stream AFTER INSERT OR UPDATE OR DELETE ON member
//	  FOR EACH ROW EXECUTE FUNCTION stream_emit('member', 'workspace_id', 'username', 'role', 'disabled');
//
// stream_emit's arguments are: the event kind, the column holding the workspace (or '' for
// none), the column holding the key, then the columns copied into the payload. Only listed
// columns are copied, so a secret column never reaches the stream by accident.
//
// Ordering: ids come from an identity column, which hands them out at insert time, not at
// commit time, so a consumer reading "id > last" could skip an id whose transaction commits
// after a higher one. stream_emit therefore takes one transaction-scoped advisory lock before
// inserting: writers of the outbox commit one after another, so ids become visible in order.
// Writes that emit events are configuration changes, rare enough for this to cost nothing.
const SchemaSQL = `
CREATE TABLE stream_outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text        NOT NULL,
    workspace  text        NOT NULL DEFAULT '',
    key        text        NOT NULL DEFAULT '',
    op         text        NOT NULL,
    payload    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stream_outbox_created_at_idx ON stream_outbox (created_at);

-- pruned_through: every id <= this value may have been deleted; a consumer resuming from an
-- older id must resync from a snapshot.
CREATE TABLE stream_state (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    pruned_through bigint  NOT NULL DEFAULT 0
);
INSERT INTO stream_state DEFAULT VALUES;

CREATE FUNCTION stream_append(p_kind text, p_workspace text, p_key text, p_op text, p_payload jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    new_id bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7294013770136241409);
    INSERT INTO stream_outbox (kind, workspace, key, op, payload)
    VALUES (p_kind, coalesce(p_workspace, ''), coalesce(p_key, ''), p_op, coalesce(p_payload, '{}'::jsonb))
    RETURNING id INTO new_id;
    PERFORM pg_notify('millwright_stream', new_id::text);
    RETURN new_id;
END $$;

CREATE FUNCTION stream_emit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r       jsonb;
    payload jsonb := '{}'::jsonb;
    i       int;
BEGIN
    IF TG_OP = 'DELETE' THEN r := to_jsonb(OLD); ELSE r := to_jsonb(NEW); END IF;
    FOR i IN 3 .. TG_NARGS - 1 LOOP
        payload := payload || jsonb_build_object(TG_ARGV[i], r -> TG_ARGV[i]);
    END LOOP;
    PERFORM stream_append(
        TG_ARGV[0],
        CASE WHEN TG_ARGV[1] = '' THEN '' ELSE r ->> TG_ARGV[1] END,
        r ->> TG_ARGV[2],
        lower(TG_OP),
        payload);
    RETURN NULL;
END $$;
`
