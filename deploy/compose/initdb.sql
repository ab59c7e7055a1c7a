-- Local stack only (deploy/compose.yaml): one role and one database per service, each role
-- owning its database and nothing else, as docs/operations.md prescribes for production.
-- The passwords are dev-only literals, matching the DATABASE_URLs in compose.yaml.
CREATE ROLE millwright_policy  LOGIN PASSWORD 'dev-policy';
CREATE ROLE millwright_roleset LOGIN PASSWORD 'dev-roleset';
CREATE ROLE millwright_billing LOGIN PASSWORD 'dev-billing';
CREATE DATABASE millwright_policy  OWNER millwright_policy;
CREATE DATABASE millwright_roleset OWNER millwright_roleset;
CREATE DATABASE millwright_billing OWNER millwright_billing;

-- The same server doubles as a data-table target cluster for trying roleset: the admin login
-- roleset is registered with holds exactly the privileges the runbook lists (no superuser).
-- On PG16 and later it also needs ADMIN OPTION on member roles it did not create itself.
CREATE ROLE millwright_roleset_admin LOGIN CREATEROLE PASSWORD 'dev-roleset-admin';
GRANT pg_signal_backend TO millwright_roleset_admin;
