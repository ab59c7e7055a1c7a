// Package app wires billing through pkg/server's lifecycle (Config, RegisterFlags,
// Complete, run): the database pool and schema check, the store with the configured seat
// weights, the projection consumer following policy's stream (a background loop), billing's
// own stream (cap changes) and the gRPC services. cmd/billing only calls Commands.
package app
