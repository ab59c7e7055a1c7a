// Package e2e tests millwright as its users meet it: the local stack that `make run` starts
// (scripts/run.sh: Postgres from the system binaries, the three services, the gateway), driven
// over gRPC and REST from outside the processes, and stopped with SIGTERM as a user would.
//
// Security cases are data, replayed on both transports: testdata/isolation.json (the tenant
// isolation matrix: every RPC of the descriptors, as every identity of another workspace) and
// testdata/attacks.json (the attack corpus: each attempt with the exact refusal it must get).
// Their format is at the top of isolation_test.go; calls_test.go sends any RPC by name.
package e2e
