// Package cli runs the tiny mains of millwright's binaries: a program is a list of
// subcommands (serve, migrate, ...) and Main picks one from os.Args, gives it a context that
// is cancelled on SIGINT/SIGTERM (how Kubernetes asks a pod to stop) and turns its result into
// the conventional exit code: 0 done, 1 failed, 2 bad usage.
package cli
