// Package itest holds the roleset service's integration tests: a real Postgres (pkg/pgtest,
// scram-sha-256 for every login) serving both the service database and the target cluster
// (a separate database and a non-superuser admin with CREATEROLE and pg_signal_backend),
// replicas of the real gRPC server on loopback, and a policy stand-in speaking policy's real
// gRPC contract (RunService, WorkspaceService, EventService); the tests of tokens against the
// real policy run it with pkg/servicetest. The connection rules are data, in
// testdata/rules.json (replayed by TestRules), with roles, users and runs named.
package itest
