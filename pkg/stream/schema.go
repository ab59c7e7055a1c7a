package stream

// Channel is the pg_notify channel every outbox insert announces itself on (the payload is the
// new id). Each service has its own database, so one fixed name per database is enough.
const Channel = "millwright_stream"

// SchemaSQL is version 1 of the stream schema, as first shipped: the outbox, its bookkeeping
// row and the functions that feed it. It is version 1 of every service's migrations
// (pkg/migrate applies it, then UpgradeSQL), so a service's own migrations can attach triggers
// with:
//
//	CREATE TRIGGER member_stream AFTER INSERT OR UPDATE OR DELETE ON member
//	  FOR EACH ROW EXECUTE FUNCTION stream_emit('member', 'workspace_id', 'username', 'role', 'disabled');
//
// stream_emit's arguments are: the event kind, the column holding the workspace (empty for none),
// the column holding the key, then the columns copied into the payload. Only listed columns are
// copied, so a secret column never reaches the stream by accident; a name that is not a column
// of the table fails the write (a typo in a migration shows up in the first test, not as
// silently empty events). The trigger must be AFTER ... FOR EACH ROW.
//
// What is emitted:
//   - INSERT and UPDATE: op "insert"/"update" with NEW's workspace, key and listed columns.
//   - DELETE: op "delete" with OLD's workspace, key and listed columns.
//   - UPDATE that changes the key or the workspace: a "delete" of the old identity, then an
//     "insert" of the new one, so a cache keyed by the old name is invalidated too.
//   - UPDATE that changes nothing at all (SET x = x): no event. An UPDATE of unlisted columns
//     still emits (a cache may depend on more than the payload); write `AFTER UPDATE OF a, b`
//     or a WHEN clause on the trigger for columns that change often and matter to no cache.
//   - TRUNCATE fires no row trigger: do not truncate streamed tables outside tests.
//
// A trigger does not write the outbox itself: stream_emit parks the event in stream_pending
// (UNLOGGED: its rows never outlive their transaction), and a DEFERRED constraint trigger
// moves it into the outbox at COMMIT, so an event's id is drawn as late as possible (the
// window in which a drawn id is not yet visible, which readers wait out, is the commit itself,
// not the whole transaction). Events of one transaction keep their statement order. A
// rolled-back transaction leaves nothing: its pending rows, outbox rows and notifications are
// all discarded with it (its ids, already drawn, are simply never used: ids have gaps).
//
// Version 1 ordered ids with a global advisory lock held from the id draw through COMMIT;
// UpgradeSQL replaces that (see its comment). This text is kept as shipped: it is what every
// existing database ran, and a new database runs it too, then the same upgrade.
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

-- Events raised by triggers wait here until their transaction commits (see stream_flush).
CREATE UNLOGGED TABLE stream_pending (
    seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind      text  NOT NULL,
    workspace text  NOT NULL,
    key       text  NOT NULL,
    op        text  NOT NULL,
    payload   jsonb NOT NULL
);

CREATE FUNCTION stream_append(p_kind text, p_workspace text, p_key text, p_op text, p_payload jsonb)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    new_id bigint;
BEGIN
    IF coalesce(p_kind, '') = '' OR coalesce(p_op, '') = '' THEN
        RAISE EXCEPTION 'stream_append: kind and op are required';
    END IF;
    -- Held until the transaction ends, i.e. after its commit is visible: ids become visible
    -- in id order.
    PERFORM pg_advisory_xact_lock(7294013770136241409);
    -- clock_timestamp(), not now(): for trigger events this runs at COMMIT, so created_at is
    -- the commit time (not the transaction's start) and grows with id, and pruning by age
    -- cannot take a row that a long transaction committed just now.
    INSERT INTO stream_outbox (kind, workspace, key, op, payload, created_at)
    VALUES (p_kind, coalesce(p_workspace, ''), coalesce(p_key, ''), p_op, coalesce(p_payload, '{}'::jsonb),
            clock_timestamp())
    RETURNING id INTO new_id;
    -- Delivered only if and when the transaction commits.
    PERFORM pg_notify('millwright_stream', new_id::text);
    RETURN new_id;
END $$;

CREATE FUNCTION stream_flush() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM stream_pending WHERE seq = NEW.seq;
    PERFORM stream_append(NEW.kind, NEW.workspace, NEW.key, NEW.op, NEW.payload);
    RETURN NULL;
END $$;

-- Deferred: runs at COMMIT, in the order the events were raised.
CREATE CONSTRAINT TRIGGER stream_pending_flush AFTER INSERT ON stream_pending
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION stream_flush();

CREATE FUNCTION stream_emit() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r       jsonb;
    o       jsonb;
    payload jsonb := '{}'::jsonb;
    opl     jsonb := '{}'::jsonb;
    ws      text := '';
    ows     text := '';
    i       int;
BEGIN
    IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'ROW' THEN
        RAISE EXCEPTION 'stream_emit on %: must be an AFTER ... FOR EACH ROW trigger', TG_TABLE_NAME;
    END IF;
    IF TG_NARGS < 3 THEN
        RAISE EXCEPTION 'stream_emit on %: arguments are (kind, workspace_column, key_column, payload_columns...)', TG_TABLE_NAME;
    END IF;
    IF TG_OP = 'DELETE' THEN r := to_jsonb(OLD); ELSE r := to_jsonb(NEW); END IF;
    IF TG_OP = 'UPDATE' THEN
        o := to_jsonb(OLD);
        IF o = r THEN
            RETURN NULL; -- nothing changed, nothing to invalidate
        END IF;
    END IF;
    FOR i IN 1 .. TG_NARGS - 1 LOOP
        IF NOT (i = 1 AND TG_ARGV[1] = '') AND NOT (r ? TG_ARGV[i]) THEN
            RAISE EXCEPTION 'stream_emit on %: % is not a column', TG_TABLE_NAME, TG_ARGV[i];
        END IF;
    END LOOP;
    FOR i IN 3 .. TG_NARGS - 1 LOOP
        payload := payload || jsonb_build_object(TG_ARGV[i], r -> TG_ARGV[i]);
    END LOOP;
    IF TG_ARGV[1] <> '' THEN ws := coalesce(r ->> TG_ARGV[1], ''); END IF;

    IF TG_OP = 'UPDATE' THEN
        IF TG_ARGV[1] <> '' THEN ows := coalesce(o ->> TG_ARGV[1], ''); END IF;
        IF ows <> ws OR coalesce(o ->> TG_ARGV[2], '') <> coalesce(r ->> TG_ARGV[2], '') THEN
            -- The object changed identity: retract the old one, announce the new one.
            FOR i IN 3 .. TG_NARGS - 1 LOOP
                opl := opl || jsonb_build_object(TG_ARGV[i], o -> TG_ARGV[i]);
            END LOOP;
            INSERT INTO stream_pending (kind, workspace, key, op, payload)
            VALUES (TG_ARGV[0], ows, coalesce(o ->> TG_ARGV[2], ''), 'delete', opl);
            INSERT INTO stream_pending (kind, workspace, key, op, payload)
            VALUES (TG_ARGV[0], ws, coalesce(r ->> TG_ARGV[2], ''), 'insert', payload);
            RETURN NULL;
        END IF;
    END IF;

    INSERT INTO stream_pending (kind, workspace, key, op, payload)
    VALUES (TG_ARGV[0], ws, coalesce(r ->> TG_ARGV[2], ''), lower(TG_OP), payload);
    RETURN NULL;
END $$;
`
