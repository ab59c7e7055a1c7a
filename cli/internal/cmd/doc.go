// Package cmd is the millwright CLI's command tree (github.com/spf13/cobra): one file per
// command group, each a thin layer that reads flags and files, calls one gRPC method of a
// service through the generated clients and hands the answer to package output.
//
// Contexts (addresses, token, workspace) come from package config; connections are
// pkg/server.Dial's (the bearer token on every call, the short reconnect backoff every
// millwright client shares). The exit code is part of the interface, so that a git hook or a
// CI step can branch on it: 0 done (allowed), 1 refused by a service (a gRPC refusal, a
// refused check, a broken audit chain), 2 a usage, configuration or transport error (the
// question was not answered). docs/cli.md is the user's guide.
package cmd
