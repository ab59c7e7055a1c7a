// Command millwright is the CLI of the millwright services (docs/cli.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/millwright/millwright/cli/internal/cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cmd.Main(ctx, os.Args[1:], cmd.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
