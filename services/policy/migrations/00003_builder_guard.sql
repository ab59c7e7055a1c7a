-- +goose Up
-- Builder rights cost seats, so turning them on must be priced first (billing's
-- CheckSeatCapForOperatorBuilder). The service's one settings write path does that and then
-- marks its transaction with millwright.builder_enable_checked = <workspace>. This trigger
-- refuses any other way of turning builder on (a bulk or sync import, a hand-written UPDATE, a
-- future RPC that forgets the check), so skipping the check is impossible rather than a
-- convention.
-- +goose StatementBegin
CREATE FUNCTION operator_settings_builder_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.operator_settings -> 'builder') = 'true'::jsonb
       AND (TG_OP = 'INSERT' OR (OLD.operator_settings -> 'builder') IS DISTINCT FROM 'true'::jsonb)
       AND current_setting('millwright.builder_enable_checked', true) IS DISTINCT FROM NEW.workspace_id THEN
        RAISE EXCEPTION 'operator builder rights turned on without the seat check'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER operator_settings_builder_guard BEFORE INSERT OR UPDATE OF operator_settings ON workspace_settings
    FOR EACH ROW EXECUTE FUNCTION operator_settings_builder_guard();

-- +goose Down
DROP TRIGGER operator_settings_builder_guard ON workspace_settings;
DROP FUNCTION operator_settings_builder_guard();
