// Package api holds the roleset service's thin gRPC handlers: protobuf <-> core, the request
// validators (one per message, run by the server's validation interceptor), the caller checks
// (admin RPCs need the superadmin or service token; ConnectionService authenticates the job
// token itself, through policy and the cache), and the mapping of core refusals to gRPC status
// with ErrorInfo reasons.
package api
