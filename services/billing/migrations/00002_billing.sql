-- Billing's own tables: the projection of policy's members and builder flags (fed only by
-- policy's stream, never by reading policy's database), the licensed cap, usage reports, and
-- the one seat definition (seat_classes) that every displayed, enforced and reported number
-- uses.

-- +goose Up
-- +goose StatementBegin

-- One row per (workspace, username), as policy keys its members. email is the seat identity
-- (exactly as policy stores it, in its one canonical form), counted once across every workspace.
-- last_event_id is the stream event that last wrote the row (0 for a snapshot load).
CREATE TABLE member (
    workspace     text    NOT NULL,
    username      text    NOT NULL,
    email         text    NOT NULL,
    role          text    NOT NULL CHECK (role IN ('admin', 'developer', 'operator')),
    disabled      boolean NOT NULL DEFAULT false,
    last_event_id bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace, username)
);

-- A workspace's builder flag (policy's one definition, pkg/builderflag). An absent row
-- means builder rights off: they are granted on request.
CREATE TABLE workspace_builder (
    workspace     text    PRIMARY KEY,
    builder       boolean NOT NULL,
    last_event_id bigint  NOT NULL DEFAULT 0
);

-- How far the projection has applied policy's stream. position is written in the same
-- transaction as every change it applies, so a crash or a killed stream can neither skip nor
-- double-apply an event. applied_events counts events applied since the last resync.
CREATE TABLE projection_state (
    singleton      boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    position       bigint      NOT NULL DEFAULT 0,
    applied_events bigint      NOT NULL DEFAULT 0,
    resyncs        bigint      NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO projection_state DEFAULT VALUES;

-- The licensed cap in whole seats; 0 means no cap. Changes are billing's own stream events.
CREATE TABLE seat_cap (
    name       text        PRIMARY KEY DEFAULT 'license' CHECK (name = 'license'),
    cap_seats  bigint      NOT NULL DEFAULT 0 CHECK (cap_seats >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO seat_cap DEFAULT VALUES;
CREATE TRIGGER seat_cap_stream AFTER INSERT OR UPDATE OR DELETE ON seat_cap
    FOR EACH ROW EXECUTE FUNCTION stream_emit('cap', '', 'name', 'cap_seats');

-- Dated snapshots of the billed number, with the weights and cap that were in force.
CREATE TABLE usage_report (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    report_date         date        NOT NULL,
    taken_at            timestamptz NOT NULL DEFAULT now(),
    authors             bigint      NOT NULL,
    operators           bigint      NOT NULL,
    milliseats          bigint      NOT NULL,
    author_milliseats   bigint      NOT NULL,
    operator_milliseats bigint      NOT NULL,
    cap_seats           bigint      NOT NULL,
    position            bigint      NOT NULL
);
CREATE INDEX usage_report_date_idx ON usage_report (report_date);

-- THE seat rule, in one place: does one enabled membership make its member an author? Admins
-- and developers author; an operator authors only in a workspace with builder rights on.
CREATE FUNCTION membership_authors(p_role text, p_builder boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT p_role <> 'operator' OR coalesce(p_builder, false) $$;

-- Per email (the seat identity, across every workspace): how many enabled memberships it has
-- and how many of them author by membership_authors. Kept current by the triggers below in
-- the same transaction as every projection write (and every hypothetical write of a price
-- check, rolled back with it), so counting seats reads 100k rows instead of aggregating every
-- membership: at 100,000 users over 1,000 workspaces the aggregate was 11-14x a count(*) of
-- the member table; this is a fraction of one (docs/benchmarks.md).
CREATE TABLE seat_person (
    email       text PRIMARY KEY,
    memberships integer NOT NULL CHECK (memberships >= 0),
    authorships integer NOT NULL CHECK (authorships >= 0 AND authorships <= memberships)
);

CREATE FUNCTION seat_person_add(p_email text, p_memberships integer, p_authorships integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_memberships = 0 AND p_authorships = 0 THEN
        RETURN;
    END IF;
    IF p_memberships >= 0 AND p_authorships >= 0 THEN
        INSERT INTO seat_person AS p (email, memberships, authorships)
        VALUES (p_email, p_memberships, p_authorships)
        ON CONFLICT (email) DO UPDATE
        SET memberships = p.memberships + excluded.memberships,
            authorships = p.authorships + excluded.authorships;
        RETURN;
    END IF;
    -- Taking away: the row exists (the contribution was added before). The CHECKs catch a
    -- counting bug rather than let a count go negative.
    UPDATE seat_person
    SET memberships = memberships + p_memberships, authorships = authorships + p_authorships
    WHERE email = p_email;
    DELETE FROM seat_person WHERE email = p_email AND memberships = 0;
END $$;

-- A membership changed: take the old one's contribution away, add the new one's.
CREATE FUNCTION member_seat_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('billing.bulk_load', true) = 'on' THEN
        RETURN NULL; -- a resync rebuilds seat_person in one statement (seat_person_rebuild)
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND NOT OLD.disabled THEN
        PERFORM seat_person_add(OLD.email, -1, -membership_authors(OLD.role,
            (SELECT builder FROM workspace_builder WHERE workspace = OLD.workspace))::integer);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NOT NEW.disabled THEN
        PERFORM seat_person_add(NEW.email, 1, membership_authors(NEW.role,
            (SELECT builder FROM workspace_builder WHERE workspace = NEW.workspace))::integer);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER member_seat AFTER INSERT OR UPDATE OR DELETE ON member
    FOR EACH ROW EXECUTE FUNCTION member_seat_trigger();

-- A workspace's builder flag changed: every enabled membership there is re-judged by
-- membership_authors, aggregated per email.
CREATE FUNCTION builder_seat_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ws      text;
    old_b   boolean := false;
    new_b   boolean := false;
BEGIN
    IF current_setting('billing.bulk_load', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN old_b := OLD.builder; ws := OLD.workspace; END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN new_b := NEW.builder; ws := NEW.workspace; END IF;
    IF old_b IS NOT DISTINCT FROM new_b THEN
        RETURN NULL;
    END IF;
    UPDATE seat_person p
    SET authorships = p.authorships + d.delta
    FROM (SELECT m.email,
                 sum(membership_authors(m.role, new_b)::integer - membership_authors(m.role, old_b)::integer) AS delta
          FROM member m
          WHERE m.workspace = ws AND NOT m.disabled
          GROUP BY m.email) d
    WHERE p.email = d.email AND d.delta <> 0;
    RETURN NULL;
END $$;
CREATE TRIGGER workspace_builder_seat AFTER INSERT OR UPDATE OR DELETE ON workspace_builder
    FOR EACH ROW EXECUTE FUNCTION builder_seat_trigger();

-- After a bulk load (a resync replaces every row with the triggers switched off for the
-- transaction), the counters are recomputed from the tables with the same membership_authors.
CREATE FUNCTION seat_person_rebuild() RETURNS void LANGUAGE sql AS $$
    DELETE FROM seat_person;
    INSERT INTO seat_person (email, memberships, authorships)
    SELECT m.email, count(*), count(*) FILTER (WHERE membership_authors(m.role, w.builder))
    FROM member m LEFT JOIN workspace_builder w ON w.workspace = m.workspace
    WHERE NOT m.disabled
    GROUP BY m.email;
$$;

-- THE seat definition (the spec's OPERATOR_SEAT_SQL): one row per email with at least one
-- enabled membership, and its class. A user is an author when they are admin or developer in
-- any workspace, or operator in any workspace with builder rights on; otherwise (operator
-- only, everywhere) an operator. Disabled memberships count nothing. Every shown, enforced
-- and reported number is computed from this function; hypothetical counts ("as if builder
-- were on") apply the change in a transaction that is rolled back and call it again.
CREATE FUNCTION seat_classes() RETURNS TABLE (email text, author boolean)
LANGUAGE sql STABLE AS $$
    SELECT p.email, p.authorships > 0 FROM seat_person p WHERE p.memberships > 0
$$;

-- Seat usage from seat_classes with the given weights, in integer milli-seats.
CREATE FUNCTION seat_usage(p_author_milli bigint, p_operator_milli bigint)
RETURNS TABLE (authors bigint, operators bigint, milliseats bigint)
LANGUAGE sql STABLE AS $$
    SELECT count(*) FILTER (WHERE c.author),
           count(*) FILTER (WHERE NOT c.author),
           coalesce(sum(CASE WHEN c.author THEN p_author_milli ELSE p_operator_milli END), 0)::bigint
    FROM seat_classes() c
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION seat_usage(bigint, bigint);
DROP FUNCTION seat_classes();
DROP TABLE usage_report, seat_cap, projection_state, workspace_builder, member, seat_person;
DROP FUNCTION seat_person_rebuild(), builder_seat_trigger(), member_seat_trigger(), seat_person_add(text, integer, integer),
    membership_authors(text, boolean);
