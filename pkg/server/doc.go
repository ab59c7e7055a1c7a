// Package server is the gRPC skeleton every millwright service runs in: Config from flags
// and environment, and Run, which serves the service's gRPC API behind a fixed interceptor
// chain (recovery, request id, logging, metrics, auth, validation, then the handler, whose
// errors go through errs.RewriteError), with OpenTelemetry tracing, Prometheus metrics,
// grpc.health.v1 tied to the database and schema, reflection, and a graceful stop on
// SIGTERM. Dial is the matching client for service-to-service calls. Every service goes
// through the same lifecycle (lifecycle.go): configuration (RegisterFlags), completion
// (Complete: validated, dependencies acquired onto Closers), run, then Closers released in
// reverse; Commands gives every binary the same serve and migrate.
//
// The point of one skeleton is that no service can forget a layer: auth and validation run
// for every RPC, including server-streaming ones, and a new RPC without a validator is
// refused rather than served unchecked.
package server
