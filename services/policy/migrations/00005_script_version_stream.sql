-- +goose Up
-- A script's versions can change while its catalog_item row does not (a version added or
-- removed, the latest hash the same), and stream_emit skips an UPDATE that changes nothing. A
-- consumer that caches (path, hash) pins must still hear of it: each version row added or
-- removed is a catalog event of its own.
CREATE TRIGGER script_version_stream AFTER INSERT OR DELETE ON script_version
    FOR EACH ROW EXECUTE FUNCTION stream_emit('catalog', 'workspace_id', 'path', 'kind', 'hash');

-- +goose Down
DROP TRIGGER script_version_stream ON script_version;
