// Package datatableref parses the data-table references a worker sends (datatable://<name>,
// datatable://<name>?role=<r>, datatable://<name>?as=viewer) and the agent worker's
// datatable + role fields into one Ref. The parser is strict on purpose: the default role is
// often admin, which owns the tables and bypasses row-level security, so anything it does not
// fully understand (an unknown or repeated key, an empty value, role together with as, any
// escaping) is refused with a stable rule instead of being read as "no role". The same
// strictness is what makes a worker that predates ?as= refuse a viewer reference rather than
// connect as the default role.
package datatableref
