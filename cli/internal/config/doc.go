// Package config is where the millwright CLI finds the services and the caller's token: a
// named context (the three gRPC addresses, a token or the path of a token file, a default
// workspace) kept in a JSON file, overridden by the environment, overridden by flags.
//
// It exists so that one rule decides every value (flag, then environment, then the chosen
// context, then scripts/run.sh's defaults) and so that a token is only ever read from a
// place other local users cannot read: the config file and a token file must not be group-
// or world-readable (the CLI writes them 0600), and a token is never taken from the command
// line, where every local user sees it with ps (the services' own rule, README.md).
package config
