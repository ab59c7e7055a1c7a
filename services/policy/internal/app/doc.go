// Package app wires the policy service through pkg/server's lifecycle (Config,
// RegisterFlags, Complete: billing dialled; then pool, store, stream listener, caches and
// their stream subscribers, authenticators, handlers and validators, into pkg/server).
// cmd/policy only calls Commands; the integration tests start the same wiring through Run.
package app
