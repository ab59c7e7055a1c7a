-- +goose Up

-- The instance that created a catalog role. Reconcile (the monitor loop on every replica) works
-- on this instance's roles only, like the sweep: a service database shared by two instances
-- must not let one finish the other's deletes or retire the other's set logins. Rows made
-- before this column are NULL; an instance claims such a row only once the role's ownership
-- marker on the cluster proves it is ours.
ALTER TABLE datatable_role ADD COLUMN instance_id text;

-- +goose Down
ALTER TABLE datatable_role DROP COLUMN instance_id;
