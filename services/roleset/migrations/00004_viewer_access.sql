-- +goose Up

-- A data table opts in to ?as=viewer (issue 14): a job then connects with its viewer's roles,
-- which is safe only where the data table's row-level security is written to answer per
-- viewer. New data tables are off until an administrator turns it on. Data tables that exist
-- when this runs were registered when every data table allowed ?as=viewer, and jobs may rely on
-- it: they are set on, so nothing that works today stops working. Turn it off per data table
-- with UpsertDatatable (viewer_access: false).
ALTER TABLE datatable ADD COLUMN viewer_access boolean NOT NULL DEFAULT true;
ALTER TABLE datatable ALTER COLUMN viewer_access SET DEFAULT false;

-- +goose Down
ALTER TABLE datatable DROP COLUMN viewer_access;
