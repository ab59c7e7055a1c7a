package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/cli/internal/config"
	"github.com/millwright/millwright/cli/internal/output"
	"github.com/millwright/millwright/pkg/server"
)

// Exit codes (docs/cli.md).
const (
	ExitOK      = 0
	ExitRefused = 1
	ExitError   = 2
)

// IO is the process around the CLI: Main takes it so tests can run the CLI in process.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// app is one invocation: the global flags and what they resolve to.
type app struct {
	IO
	flags     config.Flags
	tokenFlag string
	json      bool
	timeout   time.Duration
	out       *output.Printer
	conns     map[string]*grpc.ClientConn
	cancel    context.CancelFunc
}

// streaming marks a command that follows a stream until Ctrl-C: --timeout does not apply.
const streaming = "streaming"

// Main runs the CLI with args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, pio IO) int {
	a := &app{IO: pio, conns: map[string]*grpc.ClientConn{}}
	a.out = &output.Printer{Out: pio.Stdout}
	root := a.root()
	root.SetArgs(args)
	root.SetIn(pio.Stdin)
	root.SetOut(pio.Stdout)
	root.SetErr(pio.Stderr)
	err := root.ExecuteContext(ctx)
	if a.cancel != nil {
		a.cancel()
	}
	for _, c := range a.conns {
		c.Close()
	}
	if err == nil {
		return ExitOK
	}
	var r refused
	if !errors.As(err, &r) {
		output.Error(pio.Stderr, err, a.json)
	}
	return exitCode(err)
}

// refused is a refusal the CLI itself reports after printing it (a check that failed, a
// chain that does not verify): exit 1, nothing more to print.
type refused struct{ what string }

func (r refused) Error() string { return r.what }

// exitCode maps an error to 1 (a service said no) or 2 (no answer: usage, config, transport,
// server fault). A gRPC status is a refusal when it is about the request, not the service.
func exitCode(err error) int {
	var r refused
	if errors.As(err, &r) {
		return ExitRefused
	}
	st, ok := status.FromError(err)
	if !ok {
		return ExitError
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.Aborted, codes.OutOfRange:
		return ExitRefused
	default:
		return ExitError
	}
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "millwright",
		Short: "millwright's command-line tool: checks, explanations, seats, settings, audit",
		Long: `millwright talks gRPC to the policy, roleset and billing services.

Addresses, token and workspace come from flags, then the environment (MILLWRIGHT_POLICY_ADDR,
MILLWRIGHT_ROLESET_ADDR, MILLWRIGHT_BILLING_ADDR, MILLWRIGHT_TOKEN, MILLWRIGHT_TOKEN_FILE,
MILLWRIGHT_WORKSPACE, MILLWRIGHT_CONTEXT), then the chosen context of the config file
($MILLWRIGHT_CONFIG or $XDG_CONFIG_HOME/millwright/config.json), then make run's defaults.

Exit codes: 0 done (allowed), 1 refused by a service, 2 usage, configuration or transport error.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.tokenFlag != "" {
				return errors.New("--token: a token on the command line is visible to every local user (ps); use MILLWRIGHT_TOKEN, --token-file or a context")
			}
			a.out.JSON = a.json
			if cmd.Annotations[streaming] == "" && a.timeout > 0 {
				ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
				a.cancel = cancel
				cmd.SetContext(ctx)
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.Context, "context", "", "the context to use (default: the config file's current)")
	pf.StringVar(&a.flags.PolicyAddr, "policy-addr", "", "policy's gRPC address (default "+config.DefaultPolicyAddr+")")
	pf.StringVar(&a.flags.RolesetAddr, "roleset-addr", "", "roleset's gRPC address (default "+config.DefaultRolesetAddr+")")
	pf.StringVar(&a.flags.BillingAddr, "billing-addr", "", "billing's gRPC address (default "+config.DefaultBillingAddr+")")
	pf.StringVar(&a.flags.TokenFile, "token-file", "", "a file holding the bearer token (mode 0600)")
	pf.StringVar(&a.tokenFlag, "token", "", "refused: a token on the command line is visible to every local user")
	_ = pf.MarkHidden("token")
	pf.StringVarP(&a.flags.Workspace, "workspace", "w", "", "the workspace (default: the context's)")
	pf.BoolVar(&a.json, "json", false, "print protojson, one object per line, for scripts")
	pf.DurationVar(&a.timeout, "timeout", 30*time.Second, "deadline of each call (not of watch and tail)")

	root.AddGroup(&cobra.Group{ID: "builder", Title: "Builder checks and explanations:"},
		&cobra.Group{ID: "admin", Title: "Administration:"},
		&cobra.Group{ID: "read", Title: "Read back (get, list):"},
		&cobra.Group{ID: "follow", Title: "Streams and audit:"})
	root.AddCommand(a.contextCmd(), a.explainCmd(), a.checkCmd(), a.seatsCmd(), a.settingsCmd(),
		a.tokensCmd(), a.clustersCmd(), a.rolesCmd(), a.datatablesCmd(), a.permissionsCmd(),
		a.watchCmd(), a.auditCmd())
	root.AddCommand(a.readBackCmds()...)
	return root
}

// resolved reads the config file and applies the precedence rule.
func (a *app) resolved() (*config.Resolved, error) {
	_, f, err := a.configFile()
	if err != nil {
		return nil, err
	}
	return config.Resolve(a.flags, a.Getenv, f)
}

// Services a command may call.
const (
	policy  = "policy"
	roleset = "roleset"
	billing = "billing"
)

// conn returns the connection to svc (one per invocation), carrying the resolved token on
// every call.
func (a *app) conn(ctx context.Context, svc string) (*grpc.ClientConn, error) {
	if c, ok := a.conns[svc]; ok {
		return c, nil
	}
	r, err := a.resolved()
	if err != nil {
		return nil, err
	}
	addr := map[string]config.Setting{policy: r.PolicyAddr, roleset: r.RolesetAddr, billing: r.BillingAddr}[svc].Value
	tok, err := r.Token()
	if err != nil {
		return nil, err
	}
	c, err := server.Dial(ctx, addr, tok)
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", svc, addr, err)
	}
	a.conns[svc] = c
	return c, nil
}

// workspace is the resolved workspace, required by the commands that call it.
func (a *app) workspace() (string, error) {
	r, err := a.resolved()
	if err != nil {
		return "", err
	}
	if r.Workspace.Value == "" {
		return "", errors.New("no workspace: give --workspace, set MILLWRIGHT_WORKSPACE, or set one in the context")
	}
	return r.Workspace.Value, nil
}

// readInput reads a file argument; "-" is standard input.
func (a *app) readInput(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(a.Stdin)
	}
	return os.ReadFile(name)
}
