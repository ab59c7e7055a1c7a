// Package apidesc serves millwright's API descriptors with their documentation to gRPC
// reflection, so that `grpcurl describe` shows the comment of every service, RPC and field.
//
// protoc-gen-go leaves source info (the comments) out of the descriptors it compiles into the
// generated code, so reflection over the global registry shows bare types. `make generate`
// writes millwright.binpb with `buf build` (imports and source info included) beside this file;
// `make check-generated` keeps it in step with proto/.
package apidesc
