package stream

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// UpgradeSQL brings a database migrated with SchemaSQL (version 1) to the current stream
// schema. It is idempotent: pkg/migrate runs it after every migration run, so an existing
// database is upgraded in place the first time the new binary migrates it, and a new one
// right after version 1 and the service's files. Upgrade runs it under an advisory lock, so
// replicas migrating at once do not race.
//
// Ordering without serialising writers. Consumers read "id > last", so an id must never be
// delivered while a lower id can still appear. Identity values are drawn before COMMIT and
// become visible at COMMIT, in any order. Version 1 held one exclusive advisory lock from the
// draw through the commit, which serialised every commit that carried an event. Now it is a
// reader-writer lock on the same key:
//
//   - stream_append (run at COMMIT for trigger events, by the deferred stream_flush) takes the
//     lock SHARED before it draws an id, held until its transaction ends: writers never wait
//     for each other.
//   - stream_safe_head takes it EXCLUSIVE, which waits for every transaction that has drawn an
//     id and not yet ended (they are committing: trigger events draw at COMMIT), then reads
//     max(id) in a fresh snapshot. Every id up to it is committed, or rolled back and never
//     used; ids drawn after it are higher (the sequence only grows). The lock is released when
//     the reading statement ends. Readers deliver only up to that safe head.
//
// A reader waits for commits in flight, never for an open transaction that has not reached
// COMMIT: a long transaction (in this database or any other on the cluster), or a policy
// write waiting on billing's seat check, holds back nothing. Version 2 of this step tried
// snapshot xmin instead (PgQ's rule: deliver a row once every older xid has ended); it was
// correct, but xmin is cluster-wide, so any open transaction anywhere held back every
// service's stream, and policy's seat check, which waits for billing's projection to see
// policy's earlier events while its own transaction is open, timed out (docs/design.md).
// The price: a waiting reader queues writers behind it for the length of the commits in
// flight. Append called early in a long transaction holds the lock shared until it ends:
// call it last, as before.
//
// Wake-ups. pg_notify makes PostgreSQL serialise the commits that notify, on one global lock,
// so a notification per transaction would serialise writers again. Only one committing
// transaction at a time notifies (stream_wake, which both appends call: the holder of a
// transaction-scoped try-lock); a writer that finds it taken relies on that transaction's
// notification, after which the listener re-reads quickly a few times (see Stream.listen),
// which finds the writers that committed just after; a notification lost that way costs at
// most PollInterval, like any lost notification.
const UpgradeSQL = `
DROP FUNCTION IF EXISTS stream_xid_before(xid, xid8);

-- The wake-up of every append: one notifying commit at a time (see UpgradeSQL's comment), on
-- the id the caller appended last. Delivered only if and when the transaction commits.
CREATE OR REPLACE FUNCTION stream_wake(p_id bigint)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF pg_try_advisory_xact_lock(7294013770136241411) THEN
        PERFORM pg_notify('millwright_stream', p_id::text);
    END IF;
    RETURN p_id;
END $$;

CREATE OR REPLACE FUNCTION stream_append(p_kind text, p_workspace text, p_key text, p_op text, p_payload jsonb)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    new_id bigint;
BEGIN
    IF coalesce(p_kind, '') = '' OR coalesce(p_op, '') = '' THEN
        RAISE EXCEPTION 'stream_append: kind and op are required';
    END IF;
    -- Shared, until the transaction ends: stream_safe_head waits for it (see UpgradeSQL).
    PERFORM pg_advisory_xact_lock_shared(7294013770136241409);
    -- clock_timestamp(), not now(): for trigger events this runs at COMMIT, so created_at is
    -- the commit time (not the transaction's start) and pruning by age cannot take a row that
    -- a long transaction committed just now.
    INSERT INTO stream_outbox (kind, workspace, key, op, payload, created_at)
    VALUES (p_kind, coalesce(p_workspace, ''), coalesce(p_key, ''), p_op, coalesce(p_payload, '{}'::jsonb),
            clock_timestamp())
    RETURNING id INTO new_id;
    RETURN stream_wake(new_id);
END $$;

-- Many events of one kind and op in one call, in array order (issue 12): what a statement-level
-- trigger appends for all the rows its statement changed. The same lock and notification as
-- stream_append, taken once: it runs when the trigger fires, not at COMMIT, so the shared lock
-- is held from there to the end of the transaction. Use it only where that statement ends its
-- transaction (or comes last in it), as the job path's single-statement writes do.
CREATE OR REPLACE FUNCTION stream_append_set(p_kind text, p_op text, p_workspaces text[], p_keys text[], p_payloads jsonb[])
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    last_id bigint;
BEGIN
    IF coalesce(p_kind, '') = '' OR coalesce(p_op, '') = '' THEN
        RAISE EXCEPTION 'stream_append_set: kind and op are required';
    END IF;
    IF cardinality(p_keys) IS DISTINCT FROM cardinality(p_workspaces)
       OR cardinality(p_keys) IS DISTINCT FROM cardinality(p_payloads) THEN
        RAISE EXCEPTION 'stream_append_set: workspaces, keys and payloads must have the same length';
    END IF;
    IF coalesce(cardinality(p_keys), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(7294013770136241409);
    WITH ins AS (
        INSERT INTO stream_outbox (kind, workspace, key, op, payload, created_at)
        SELECT p_kind, coalesce(w, ''), coalesce(k, ''), p_op, coalesce(p, '{}'::jsonb), clock_timestamp()
        FROM unnest(p_workspaces, p_keys, p_payloads) WITH ORDINALITY AS e(w, k, p, n)
        ORDER BY n
        RETURNING id
    )
    SELECT max(id) INTO last_id FROM ins;
    RETURN stream_wake(last_id);
END $$;

-- The highest id up to which every id is committed or will never exist. Call it as a
-- statement of its own in READ COMMITTED (its SELECT then takes a snapshot after the lock is
-- held); the lock is released when the calling transaction ends.
CREATE OR REPLACE FUNCTION stream_safe_head() RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    h bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7294013770136241409);
    SELECT greatest(coalesce((SELECT max(id) FROM stream_outbox), 0), (SELECT pruned_through FROM stream_state))
      INTO h;
    RETURN h;
END $$;

-- stream_safe_head without the wait: NULL when a writer holds the lock (a commit is in flight),
-- so a listener can read at once when nothing is committing, without queueing the writers
-- that arrive meanwhile, and space out only the reads that would (Stream.listen).
CREATE OR REPLACE FUNCTION stream_try_safe_head() RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(7294013770136241409) THEN
        RETURN NULL;
    END IF;
    RETURN greatest(coalesce((SELECT max(id) FROM stream_outbox), 0), (SELECT pruned_through FROM stream_state));
END $$;

-- The outbox partitioned by time (issue 12), so that pruning drops whole partitions (O(1) per
-- period) instead of deleting rows. Skipped once stream_outbox is partitioned. Existing rows
-- stay where they are: the old table becomes the partition stream_outbox_legacy, covering
-- everything up to the hour after its newest row, dropped like any other partition once that
-- bound is older than the retention. Ids keep growing from where the identity stopped (a
-- sequence: PostgreSQL 15 has no identity columns on partitioned tables). The default
-- partition catches rows outside every range, so a write never fails for want of a partition;
-- Stream.Prune creates the partitions ahead and deletes the default's expired rows.
DO $upgrade$
DECLARE
    next  bigint;
    bound timestamptz;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'stream_outbox'::regclass) = 'p' THEN
        RETURN;
    END IF;
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
                   pg_get_serial_sequence('stream_outbox', 'id')) INTO next;
    ALTER TABLE stream_outbox RENAME TO stream_outbox_legacy;
    -- The partition gets the parent's primary key (id, created_at) at ATTACH: it leads with id.
    ALTER TABLE stream_outbox_legacy DROP CONSTRAINT stream_outbox_pkey;
    ALTER INDEX stream_outbox_created_at_idx RENAME TO stream_outbox_legacy_created_at_idx;
    ALTER TABLE stream_outbox_legacy ALTER COLUMN id DROP IDENTITY;
    EXECUTE format('CREATE SEQUENCE stream_outbox_id_seq START WITH %s', next);
    CREATE TABLE stream_outbox (
        id         bigint      NOT NULL DEFAULT nextval('stream_outbox_id_seq'),
        kind       text        NOT NULL,
        workspace  text        NOT NULL DEFAULT '',
        key        text        NOT NULL DEFAULT '',
        op         text        NOT NULL,
        payload    jsonb       NOT NULL DEFAULT '{}'::jsonb,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (id, created_at)
    ) PARTITION BY RANGE (created_at);
    ALTER SEQUENCE stream_outbox_id_seq OWNED BY stream_outbox.id;
    CREATE INDEX stream_outbox_created_at_idx ON stream_outbox (created_at);
    bound := date_trunc('hour', now()) + interval '1 hour';
    IF EXISTS (SELECT 1 FROM stream_outbox_legacy) THEN
        bound := greatest(bound, date_trunc('hour', (SELECT max(created_at) FROM stream_outbox_legacy)) + interval '1 hour');
        EXECUTE format('ALTER TABLE stream_outbox ATTACH PARTITION stream_outbox_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    ELSE
        DROP TABLE stream_outbox_legacy;
        bound := date_trunc('hour', now());
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF stream_outbox FOR VALUES FROM (%L) TO (%L)',
                   'stream_outbox_p' || to_char(bound AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS'), bound, bound + interval '1 day');
    CREATE TABLE stream_outbox_default PARTITION OF stream_outbox DEFAULT;
END $upgrade$;
`

// upgradeLock serialises UpgradeSQL runs (replicas migrating together).
const upgradeLock = 7294013770136241410

// Upgrade runs UpgradeSQL in one transaction under an advisory lock.
func Upgrade(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(upgradeLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, UpgradeSQL); err != nil {
			return fmt.Errorf("stream: upgrade schema: %w", err)
		}
		return nil
	})
}
