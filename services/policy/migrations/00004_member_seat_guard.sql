-- +goose Up
-- Members cost seats like builder rights do (00003_builder_guard.sql): a member write that may
-- add seats must be priced by billing first (CheckSeatCap with the member change). The store's
-- member writes (UpsertMember, CreateWorkspace's first admin) ask member_may_add_seats, price
-- the write when it says so and mark their transaction with
-- millwright.member_seat_checked = '<workspace>/<username>'. The trigger below refuses any
-- other write that may add seats, so an import or a hand-written INSERT cannot skip the check.

-- +goose StatementBegin
-- Can writing a member (old state, or NULLs for a new row) add seats? One definition for the
-- store (whether to ask billing) and the guard (whether the write must have asked). It is
-- conservative: billing prices what it lets through, and answers "no cost" (allowed even at
-- the cap) for e.g. a developer who already authors elsewhere. A disabled membership counts
-- nothing; otherwise a new or re-enabled membership, another email (another person), or an
-- operator made admin or developer may add seats. Demoting, changing admin <-> developer,
-- disabling and deleting never do (an operator never weighs more than an author).
CREATE FUNCTION member_may_add_seats(old_email text, old_role text, old_disabled boolean,
                                     new_email text, new_role text, new_disabled boolean)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT NOT new_disabled
       AND (old_email IS NULL OR old_disabled OR old_email <> new_email
            OR (old_role = 'operator' AND new_role <> 'operator'))
$$;

-- AFTER, not BEFORE: INSERT ... ON CONFLICT DO UPDATE fires BEFORE INSERT triggers for the
-- proposed row even when it ends as an update (a demotion would look like a new member); AFTER
-- triggers fire only for what was really inserted or updated.
CREATE FUNCTION member_seat_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    adds boolean;
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.workspace_id = NEW.workspace_id AND OLD.username = NEW.username THEN
        adds := member_may_add_seats(OLD.email, OLD.role, OLD.disabled, NEW.email, NEW.role, NEW.disabled);
    ELSE
        adds := member_may_add_seats(NULL, NULL, NULL, NEW.email, NEW.role, NEW.disabled);
    END IF;
    IF adds AND current_setting('millwright.member_seat_checked', true)
                IS DISTINCT FROM NEW.workspace_id || '/' || NEW.username THEN
        RAISE EXCEPTION 'member % of % written without the seat check', NEW.username, NEW.workspace_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER member_seat_guard AFTER INSERT OR UPDATE ON member
    FOR EACH ROW EXECUTE FUNCTION member_seat_guard();

-- +goose Down
DROP TRIGGER member_seat_guard ON member;
DROP FUNCTION member_seat_guard();
DROP FUNCTION member_may_add_seats(text, text, boolean, text, text, boolean);
