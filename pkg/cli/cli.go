package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Command is one subcommand. Run gets the arguments after the subcommand name and usually
// parses them with its own flag.FlagSet via ParseFlags.
type Command struct {
	Name  string
	Usage string // one line, shown in the program's usage
	Run   func(ctx context.Context, args []string) error
}

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// UsageError marks an error as the caller's mistake (bad flag, bad argument): exit code 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Main runs the subcommand named by os.Args[1] and exits. Call it as the whole of main.
func Main(prog string, cmds ...Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, prog, os.Args[1:], os.Stderr, cmds...)
	stop()
	os.Exit(code)
}

// Run is Main without the process around it (testable): it returns the exit code and writes
// usage and errors to stderr.
func Run(ctx context.Context, prog string, args []string, stderr io.Writer, cmds ...Command) int {
	usage := func() {
		fmt.Fprintf(stderr, "usage: %s <command> [flags]\n\ncommands:\n", prog)
		for _, c := range cmds {
			fmt.Fprintf(stderr, "  %-12s %s\n", c.Name, c.Usage)
		}
		fmt.Fprintf(stderr, "\nRun '%s <command> -h' for the flags of a command.\n", prog)
	}
	if len(args) == 0 {
		usage()
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage()
		return ExitOK
	}
	for _, c := range cmds {
		if c.Name != args[0] {
			continue
		}
		err := c.Run(ctx, args[1:])
		var uerr *UsageError
		switch {
		case err == nil:
			return ExitOK
		case errors.Is(err, flag.ErrHelp):
			return ExitOK
		case errors.As(err, &uerr):
			fmt.Fprintf(stderr, "%s %s: %v\n", prog, c.Name, err)
			return ExitUsage
		default:
			fmt.Fprintf(stderr, "%s %s: %v\n", prog, c.Name, err)
			return ExitError
		}
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n\n", prog, args[0])
	usage()
	return ExitUsage
}

// ParseFlags parses args into fs and classifies failures as UsageError (flag.ErrHelp is
// passed through: -h is not a failure). It also reports environment variables that were set
// to a value their flag cannot parse (see server.StringVar and friends): such a value is a
// configuration mistake, and silently using the default instead would hide it. And it
// reports flags given a value the command line may not carry (server.SecretVar, DSNVar).
func ParseFlags(fs *flag.FlagSet, args []string) error {
	fs.Init(fs.Name(), flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{Err: err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if e, ok := f.Value.(interface{ EnvError() error }); ok && !set[f.Name] && e.EnvError() != nil {
			errs = append(errs, e.EnvError())
		}
		// A value the command line may not carry (a secret, see server.SecretVar).
		if e, ok := f.Value.(interface{ FlagError() error }); ok && set[f.Name] && e.FlagError() != nil {
			errs = append(errs, e.FlagError())
		}
	})
	if len(errs) > 0 {
		return &UsageError{Err: errors.Join(errs...)}
	}
	return nil
}
