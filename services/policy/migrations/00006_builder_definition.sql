-- +goose Up
-- One definition of "builder rights are on" (pkg/builderflag, docs/design.md): the
-- operator_settings member "builder" holds the JSON literal true. Before this migration the
-- guard watched only "builder" while billing also counted builder_flows, builder_apps and
-- operator_builder_enabled, so writing {"builder_apps": true} passed the guard unpriced, made
-- billing charge operators as authors, and policy still refused them.
-- +goose StatementBegin
CREATE FUNCTION operator_builder_on(s jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT coalesce(s -> 'builder' = 'true'::jsonb, false) $$;

-- The first key (in jsonb's order) that is refused on write: any key spelling "builder" in
-- some ASCII case other than the two known keys (earlier names of the right, a mistyped case).
-- The fold is ASCII-only (translate, not lower()) so it does not depend on the locale and
-- matches what docs/design.md says.
CREATE FUNCTION operator_settings_refused_key(s jsonb) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT k FROM jsonb_object_keys(s) AS k
    WHERE strpos(translate(k, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), 'builder') > 0
      AND k NOT IN ('builder', 'strip_builder_sdk_read_scopes')
    LIMIT 1
$$;

-- The guard of migration 00003, now over the one definition, and refusing the keys no reader
-- counts and a "builder" that is not a boolean (it would silently mean off).
CREATE OR REPLACE FUNCTION operator_settings_builder_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    refused text := operator_settings_refused_key(NEW.operator_settings);
BEGIN
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'operator_settings key "%" is refused: builder rights are the key "builder" only', refused
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.operator_settings ? 'builder' AND jsonb_typeof(NEW.operator_settings -> 'builder') <> 'boolean' THEN
        RAISE EXCEPTION 'operator_settings key "builder" must be a JSON boolean'
            USING ERRCODE = 'check_violation';
    END IF;
    IF operator_builder_on(NEW.operator_settings)
       AND (TG_OP = 'INSERT' OR NOT operator_builder_on(OLD.operator_settings))
       AND current_setting('millwright.builder_enable_checked', true) IS DISTINCT FROM NEW.workspace_id THEN
        RAISE EXCEPTION 'operator builder rights turned on without the seat check'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd

-- The stream payload carries the flag as the schema computes it, so billing reads the decision
-- rather than re-deriving it from the object.
ALTER TABLE workspace_settings
    ADD COLUMN builder boolean GENERATED ALWAYS AS (operator_builder_on(operator_settings)) STORED;
DROP TRIGGER operator_settings_change ON workspace_settings;
DROP TRIGGER operator_settings_insert ON workspace_settings;
CREATE TRIGGER operator_settings_change AFTER UPDATE OF operator_settings ON workspace_settings
    FOR EACH ROW WHEN (OLD.operator_settings IS DISTINCT FROM NEW.operator_settings)
    EXECUTE FUNCTION stream_emit('settings', 'workspace_id', 'workspace_id', 'operator_settings', 'builder');
CREATE TRIGGER operator_settings_insert AFTER INSERT OR DELETE ON workspace_settings
    FOR EACH ROW EXECUTE FUNCTION stream_emit('settings', 'workspace_id', 'workspace_id', 'operator_settings', 'builder');

-- Stored objects written before the guard may hold refused keys (policy never read them; billing
-- did). They are dropped, and a non-boolean "builder" (read as off) is removed, so every row
-- satisfies the guard; each changed row emits a settings event carrying the one flag, which
-- brings billing's projection back in line.
UPDATE workspace_settings
SET operator_settings = (
    SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}'::jsonb)
    FROM jsonb_each(operator_settings) AS e
    WHERE NOT (strpos(translate(e.key, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), 'builder') > 0
               AND e.key NOT IN ('builder', 'strip_builder_sdk_read_scopes'))
      AND NOT (e.key = 'builder' AND jsonb_typeof(e.value) <> 'boolean'))
WHERE operator_settings_refused_key(operator_settings) IS NOT NULL
   OR (operator_settings ? 'builder' AND jsonb_typeof(operator_settings -> 'builder') <> 'boolean');

-- +goose Down
DROP TRIGGER operator_settings_change ON workspace_settings;
DROP TRIGGER operator_settings_insert ON workspace_settings;
ALTER TABLE workspace_settings DROP COLUMN builder;
CREATE TRIGGER operator_settings_change AFTER UPDATE OF operator_settings ON workspace_settings
    FOR EACH ROW WHEN (OLD.operator_settings IS DISTINCT FROM NEW.operator_settings)
    EXECUTE FUNCTION stream_emit('settings', 'workspace_id', 'workspace_id', 'operator_settings');
CREATE TRIGGER operator_settings_insert AFTER INSERT OR DELETE ON workspace_settings
    FOR EACH ROW EXECUTE FUNCTION stream_emit('settings', 'workspace_id', 'workspace_id', 'operator_settings');
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION operator_settings_builder_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
DROP FUNCTION operator_settings_refused_key(jsonb), operator_builder_on(jsonb);
