// Package validate holds the request validators of a service: one function per request
// message, registered in a Registry that the server's validation interceptor runs before any
// handler. Refusals are InvalidArgument naming the field and a stable rule (see pkg/errs).
//
// The registry fails closed: a request type without a validator is refused with Internal, so
// a new RPC cannot ship unchecked by accident, and Missing lets a per-service test list the
// request types that still lack one. Validation is written in Go rather than declared with
// protovalidate because its proto sources are not available to this build.
package validate
