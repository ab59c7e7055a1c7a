// Package output prints what the millwright CLI gets back: aligned tables and "field: value"
// lines for people, protojson (one object per line, proto field names as over REST) for
// scripts, and every refusal with what the services attach to it (gRPC code, each ErrorInfo's
// reason and its rule, field and JSON pointer; docs/conventions.md).
//
// It exists so that every command prints the same way: a command hands over a message or
// rows and never formats by hand, and an error reads the same whichever command met it.
package output
