// Package app wires the roleset service through pkg/server's lifecycle (Config,
// RegisterFlags, Complete, run): the pool, the engine, the policy connection and its
// follower, the own-stream listener that drops caches on this service's events, the monitor
// loop (sweep and reconcile) and the gRPC server. cmd/roleset only calls Commands.
package app
