// Package e2e tests millwright as its users meet it: the local stack that `make run` starts
// (scripts/run.sh: Postgres from the system binaries, the three services, the gateway), driven
// over gRPC and REST from outside the processes, and stopped with SIGTERM as a user would.
package e2e
