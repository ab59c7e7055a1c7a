// Package app wires the policy service: pool, store, stream listener, caches and their stream
// subscribers, authenticators, handlers and validators, into pkg/server. cmd/policy and the
// integration tests both start the service through Run, so tests exercise the real wiring.
package app
