package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/millwright/millwright/cli/internal/config"
	"github.com/millwright/millwright/cli/internal/output"
)

func (a *app) contextCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "context",
		Short: "Manage the named sets of addresses, token and workspace in the config file",
	}
	var tokenStdin, use bool
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Add or replace a context from --policy-addr, --roleset-addr, --billing-addr, --workspace, --token-file",
		Long: `Add or replace a context. The addresses and the workspace are the global flags' values;
the token is either a file named by --token-file (stored as its path) or read from standard
input with --token-stdin (stored in the config file, which is kept mode 0600).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := config.Context{
				Name: args[0], PolicyAddr: a.flags.PolicyAddr, RolesetAddr: a.flags.RolesetAddr,
				BillingAddr: a.flags.BillingAddr, TokenFile: a.flags.TokenFile, Workspace: a.flags.Workspace,
			}
			if ctx.TokenFile != "" {
				// Kept absolute: the context is used from any directory.
				abs, err := filepath.Abs(ctx.TokenFile)
				if err != nil {
					return err
				}
				ctx.TokenFile = abs
			}
			if tokenStdin {
				if ctx.TokenFile != "" {
					return errors.New("--token-stdin and --token-file are alternatives")
				}
				line, err := bufio.NewReader(a.Stdin).ReadString('\n')
				ctx.Token = strings.TrimSpace(line)
				if ctx.Token == "" {
					return fmt.Errorf("--token-stdin: no token on standard input (%w)", err)
				}
			}
			return a.editConfig(func(f *config.File) error {
				f.Put(ctx)
				if use || f.Current == "" {
					f.Current = ctx.Name
				}
				return nil
			})
		},
	}
	add.Flags().BoolVar(&tokenStdin, "token-stdin", false, "read the token from standard input and keep it in the config file")
	add.Flags().BoolVar(&use, "use", false, "make it the current context")

	useCmd := &cobra.Command{
		Use: "use NAME", Short: "Make NAME the current context", Args: cobra.ExactArgs(1),
		ValidArgsFunction: a.contextNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.editConfig(func(f *config.File) error {
				if _, ok := f.Find(args[0]); !ok {
					return fmt.Errorf("no context %q", args[0])
				}
				f.Current = args[0]
				return nil
			})
		},
	}
	remove := &cobra.Command{
		Use: "remove NAME", Short: "Remove a context", Args: cobra.ExactArgs(1),
		ValidArgsFunction: a.contextNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.editConfig(func(f *config.File) error {
				if !f.Remove(args[0]) {
					return fmt.Errorf("no context %q", args[0])
				}
				return nil
			})
		},
	}
	list := &cobra.Command{
		Use: "list", Short: "List the contexts (a token shows as set, never its value)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, f, err := a.configFile()
			if err != nil {
				return err
			}
			cols := []output.Column[config.Context]{
				{Head: "CURRENT", Value: func(c config.Context) string { return map[bool]string{true: "*"}[c.Name == f.Current] }},
				{Head: "NAME", Value: func(c config.Context) string { return c.Name }},
				{Head: "POLICY", Value: func(c config.Context) string { return c.PolicyAddr }},
				{Head: "ROLESET", Value: func(c config.Context) string { return c.RolesetAddr }},
				{Head: "BILLING", Value: func(c config.Context) string { return c.BillingAddr }},
				{Head: "WORKSPACE", Value: func(c config.Context) string { return c.Workspace }},
				{Head: "TOKEN", Value: func(c config.Context) string {
					if c.TokenFile != "" {
						return "file " + c.TokenFile
					}
					return map[bool]string{true: "set"}[c.Token != ""]
				}},
			}
			return output.Rows(a.Stdout, cols, f.Contexts, true)
		},
	}
	current := &cobra.Command{
		Use: "current", Short: "Show what the CLI will use and where each value comes from", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.resolved()
			if err != nil {
				return err
			}
			s := func(v config.Setting) string {
				if v.Value == "" {
					return "-"
				}
				return v.Value + " (" + v.Source + ")"
			}
			fmt.Fprintf(a.Stdout, "context: %s\npolicy: %s\nroleset: %s\nbilling: %s\nworkspace: %s\ntoken: %s\n",
				map[bool]string{true: r.Context, false: "-"}[r.Context != ""],
				s(r.PolicyAddr), s(r.RolesetAddr), s(r.BillingAddr), s(r.Workspace), r.TokenSource())
			return nil
		},
	}
	c.AddCommand(add, useCmd, remove, list, current)
	return c
}

// configFile loads the config file and returns its path.
func (a *app) configFile() (string, *config.File, error) {
	path, err := config.Path(a.Getenv)
	if err != nil {
		return "", nil, err
	}
	f, err := config.Load(path)
	return path, f, err
}

// editConfig loads the config file, applies edit and saves it (mode 0600).
func (a *app) editConfig(edit func(*config.File) error) error {
	path, f, err := a.configFile()
	if err != nil {
		return err
	}
	if err := edit(f); err != nil {
		return err
	}
	return config.Save(path, f)
}

// contextNames completes a context name.
func (a *app) contextNames(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	_, f, err := a.configFile()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, c := range f.Contexts {
		names = append(names, c.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
