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
// Ordering without a global lock. Consumers read "id > last", so an id must never be
// delivered while a lower id can still appear. Identity values are drawn before COMMIT and
// become visible at COMMIT, in any order; version 1 therefore held one advisory lock from the
// draw through the commit, which serialised every commit that carried an event (and the
// notification each one sent serialised them again). Now writers never wait for each other,
// and readers wait instead, PgQ-style, using transaction snapshots:
//
//   - stream_append inserts the row inside a subtransaction, so the row's xmin is an xid
//     assigned after its id was drawn: every transaction that drew a lower id earlier (each
//     has its xid before it draws) has a smaller xid, or is the row's own transaction.
//   - A reader, in snapshot S, treats row N as safe when its xmin precedes xmin(S): every
//     transaction with a smaller xid has ended in S, so every lower id is either visible in S
//     or was rolled back and will never exist. The highest safe id is the "safe head"; Head
//     returns it and the listener and Watch deliver only up to it, in id order.
//
// Why a subtransaction and not pg_current_snapshot()'s xmax taken after the draw: PostgreSQL
// (14+) reuses a backend's last snapshot when no transaction ended since, so that xmax can
// predate xids assigned in between; TestConcurrentWritersDeliveredInOrderExactlyOnce lost
// events that way. A fresh xid cannot be stale. The subtransaction's xid stays in its parent's
// cache until the parent ends; a transaction emitting more than 64 events overflows that cache,
// which only makes snapshots taken meanwhile slower, never wrong.
//
// The cost moves to readers: an event is delivered once every transaction with a smaller xid
// has ended, so one long write transaction (any transaction holding an xid) holds back
// delivery until it ends. Keep write transactions short; see docs/design.md.
//
// Wake-ups. pg_notify makes PostgreSQL serialise the commits that notify, on one global lock,
// so a notification per transaction would serialise writers again. Only one committing
// transaction at a time notifies (the holder of a transaction-scoped try-lock); a writer that
// finds it taken relies on that transaction's notification, after which the listener re-reads
// quickly a few times (see Stream.listen), which finds the writers that committed just after.
const UpgradeSQL = `
-- stream_xid_before(x, s): x precedes s's xmin (32-bit xid arithmetic, as PostgreSQL's own);
-- frozen and bootstrap xids (0-2) precede everything.
CREATE OR REPLACE FUNCTION stream_xid_before(x xid, lim xid8) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT x::text::bigint <= 2
        OR ((lim::text::bigint - x::text::bigint) & 4294967295) BETWEEN 1 AND 2147483647
$$;

CREATE OR REPLACE FUNCTION stream_append(p_kind text, p_workspace text, p_key text, p_op text, p_payload jsonb)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    new_id bigint;
BEGIN
    IF coalesce(p_kind, '') = '' OR coalesce(p_op, '') = '' THEN
        RAISE EXCEPTION 'stream_append: kind and op are required';
    END IF;
    -- The xid before the id: any transaction that draws a higher id later gets a newer xid.
    PERFORM pg_current_xact_id();
    -- The exception block is the subtransaction: the row's xmin is an xid newer than the id
    -- drawn by the same statement (see UpgradeSQL). clock_timestamp(), not now(): for trigger
    -- events this runs at COMMIT, so created_at is the commit time (not the transaction's
    -- start) and pruning by age cannot take a row that a long transaction committed just now.
    BEGIN
        INSERT INTO stream_outbox (kind, workspace, key, op, payload, created_at)
        VALUES (p_kind, coalesce(p_workspace, ''), coalesce(p_key, ''), p_op, coalesce(p_payload, '{}'::jsonb),
                clock_timestamp())
        RETURNING id INTO new_id;
    EXCEPTION WHEN OTHERS THEN
        RAISE;
    END;
    -- One notifying commit at a time (see UpgradeSQL's comment). Delivered only if and when
    -- the transaction commits.
    IF pg_try_advisory_xact_lock(7294013770136241411) THEN
        PERFORM pg_notify('millwright_stream', new_id::text);
    END IF;
    RETURN new_id;
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
