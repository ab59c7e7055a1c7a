package cli_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

func TestRun(t *testing.T) {
	var got []string
	serve := cli.Command{Name: "serve", Usage: "run the server", Run: func(_ context.Context, args []string) error {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		n := fs.Int("n", 0, "a number")
		if err := cli.ParseFlags(fs, args); err != nil {
			return err
		}
		got = append(got, fs.Args()...)
		if *n == 13 {
			return errors.New("unlucky")
		}
		return nil
	}}
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, cli.ExitUsage, "usage: prog <command>"},
		{"help", []string{"help"}, cli.ExitOK, "serve"},
		{"unknown command", []string{"nope"}, cli.ExitUsage, `unknown command "nope"`},
		{"ok", []string{"serve", "-n", "1", "extra"}, cli.ExitOK, ""},
		{"bad flag", []string{"serve", "-x"}, cli.ExitUsage, "flag provided but not defined"},
		{"flag help", []string{"serve", "-h"}, cli.ExitOK, ""},
		{"command error", []string{"serve", "-n", "13"}, cli.ExitError, "prog serve: unlucky"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := cli.Run(context.Background(), "prog", tc.args, &stderr, serve)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, stderr.String(), tc.stderr)
		})
	}
	assert.Equal(t, []string{"extra"}, got)
}

func TestParseFlagsBadEnv(t *testing.T) {
	t.Setenv("MILLWRIGHT_TEST_TIMEOUT", "soon")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg server.Config
	var n int
	cfg.RegisterFlags(fs, server.Config{})
	server.IntVar(fs, &n, "workers", "MILLWRIGHT_TEST_TIMEOUT", 4, "workers")

	err := cli.ParseFlags(fs, nil)
	var uerr *cli.UsageError
	require.ErrorAs(t, err, &uerr)
	assert.Contains(t, err.Error(), "MILLWRIGHT_TEST_TIMEOUT")

	// A flag on the command line overrides the bad environment value: no error.
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	server.IntVar(fs, &n, "workers", "MILLWRIGHT_TEST_TIMEOUT", 4, "workers")
	require.NoError(t, cli.ParseFlags(fs, []string{"-workers", "2"}))
	assert.Equal(t, 2, n)
}
