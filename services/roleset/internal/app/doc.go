// Package app wires the roleset service from its config: pools, migrations, the engine, the
// policy connection and its follower, the own-stream listener that drops caches on this
// service's events, the monitor loop (sweep and reconcile) and the gRPC server.
package app
