// Package api holds billing's thin gRPC handlers: authorize the caller, translate protobuf to
// the store's and seats' types and back, and map errors to gRPC statuses (PROJECTION_BEHIND
// as Unavailable, everything else through errs.RewriteError). Request validation lives here
// too, one validator per message, run by the server's validation interceptor.
package api
