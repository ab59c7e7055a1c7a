-- +goose Up
-- One stream event per job instead of three (issue 12, docs/design.md "The job path"). Each
-- event was a plpgsql row trigger, a stream_pending row and a deferred move to the outbox at
-- COMMIT; at one caller they were most of what RecordRun and FinishRun cost beyond a bare
-- INSERT and UPDATE.
--
--   - RecordRun's run insert no longer emits: a new run makes no cached answer wrong (caches
--     hold only positive answers: an identity that authenticated, a run that was found).
--   - FinishRun no longer revokes the job token row: a job token authenticates only while its
--     run is unfinished (store.authenticate, and RecordRun for a child), so finishing the run
--     is the revocation, and the run's "update" event is what drops it from every cache
--     (pkg/policyclient.Invalidate, roleset's cache). A job token can still be revoked on its
--     own (RevokeToken): that update emits its "token" event as before.
--   - The run's update event is appended by one statement-level trigger for all the rows the
--     statement changed (stream_append_set: one lock, one outbox insert), so every UPDATE of
--     run still emits, whoever writes it. Deletes keep their row trigger.

DROP TRIGGER run_stream ON run;
DROP TRIGGER run_stream_update ON run;
CREATE TRIGGER run_stream AFTER DELETE ON run
    FOR EACH ROW EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');

-- +goose StatementBegin
-- The rows are paired by job id: run_identity_immutable (BEFORE UPDATE) refuses any change to
-- it. The payload is what run_stream_update copied before.
CREATE FUNCTION run_stream_update() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM stream_append_set('run', 'update', array_agg(n.workspace_id ORDER BY n.job_id),
                              array_agg(n.job_id::text ORDER BY n.job_id),
                              array_agg(jsonb_build_object('origin', n.origin, 'permissioned_as', n.permissioned_as,
                                                           'parent_job_id', n.parent_job_id, 'finished_at', n.finished_at)
                                        ORDER BY n.job_id))
    FROM run_new n JOIN run_old o ON o.job_id = n.job_id
    WHERE row(o.*) IS DISTINCT FROM row(n.*);
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER run_stream_update AFTER UPDATE ON run
    REFERENCING OLD TABLE AS run_old NEW TABLE AS run_new
    FOR EACH STATEMENT EXECUTE FUNCTION run_stream_update();

-- One run per job id among the retained runs (00007's run_job_id_unique), checked once per
-- statement instead of once per row: a row trigger was a plpgsql call, a lock and a probe of
-- every retained partition for each run of a batch. AFTER the statement, the job ids it
-- inserted are locked in one order (two batches sharing ids cannot deadlock), then counted
-- among all retained runs in a snapshot taken after the locks: a concurrent insert of the same
-- id either committed before we got the lock (we count it) or waits for our commit and counts
-- ours. Same error as the old primary key.
-- +goose StatementBegin
CREATE FUNCTION run_job_ids_unique() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    dup uuid;
BEGIN
    PERFORM pg_advisory_xact_lock(7501166, h)
    FROM (SELECT DISTINCT hashtext(job_id::text) AS h FROM run_new ORDER BY 1) ids;
    SELECT r.job_id INTO dup FROM run r
    WHERE r.job_id IN (SELECT job_id FROM run_new)
    GROUP BY r.job_id HAVING count(*) > 1
    LIMIT 1;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "run_pkey"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'run_pkey',
                  DETAIL = format('Key (job_id)=(%s) already exists.', dup);
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
DROP TRIGGER run_job_id_unique ON run;
CREATE TRIGGER run_job_ids_unique AFTER INSERT ON run
    REFERENCING NEW TABLE AS run_new
    FOR EACH STATEMENT EXECUTE FUNCTION run_job_ids_unique();

-- +goose Down
DROP TRIGGER run_job_ids_unique ON run;
DROP FUNCTION run_job_ids_unique();
CREATE TRIGGER run_job_id_unique BEFORE INSERT ON run
    FOR EACH ROW EXECUTE FUNCTION run_job_id_unique();
DROP TRIGGER run_stream_update ON run;
DROP FUNCTION run_stream_update();
DROP TRIGGER run_stream ON run;
CREATE TRIGGER run_stream AFTER INSERT OR DELETE ON run
    FOR EACH ROW EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');
CREATE TRIGGER run_stream_update AFTER UPDATE ON run
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW)
    EXECUTE FUNCTION stream_emit('run', 'workspace_id', 'job_id', 'origin', 'permissioned_as', 'parent_job_id', 'finished_at');
