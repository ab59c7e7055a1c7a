// Package api holds the policy service's gRPC handlers: protobuf in, domain call, protobuf out,
// domain errors mapped to gRPC status with ErrorInfo. Who may call what is one table (authz.go)
// consulted by every handler through authorize; the request validators (validators.go) run in
// the server's validation interceptor before any handler.
package api
