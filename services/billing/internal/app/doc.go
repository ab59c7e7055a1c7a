// Package app wires billing's configuration to a running server: the database pool and
// schema check, the store with the configured seat weights, the projection consumer
// following policy's stream (a background loop), billing's own stream (cap changes) and the
// gRPC services. cmd/billing only calls Serve and Migrate.
package app
