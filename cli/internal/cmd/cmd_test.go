package cmd

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// TestExitCode: 1 only when a service decided against the request; 2 when nothing was
// decided (the hook or CI step must not read "not asked" as "refused", nor as "allowed").
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{status.Error(codes.PermissionDenied, ""), ExitRefused},
		{status.Error(codes.InvalidArgument, ""), ExitRefused},
		{status.Error(codes.FailedPrecondition, ""), ExitRefused},
		{status.Error(codes.NotFound, ""), ExitRefused},
		{refused{"chain broken"}, ExitRefused},
		{status.Error(codes.Unavailable, ""), ExitError},
		{status.Error(codes.DeadlineExceeded, ""), ExitError},
		{status.Error(codes.Unauthenticated, ""), ExitError},
		{status.Error(codes.Internal, ""), ExitError},
		{errors.New("unknown flag"), ExitError},
	} {
		require.Equal(t, tc.want, exitCode(tc.err), "%v", tc.err)
	}
}

func TestSettingsPatch(t *testing.T) {
	on, off := true, false
	for _, tc := range []struct {
		args []string
		want *policyv1.OperatorSettingsPatch
		err  string
	}{
		{args: []string{"builder=true"}, want: &policyv1.OperatorSettingsPatch{Builder: &on}},
		{args: []string{"builder=false", "runs=1"}, want: &policyv1.OperatorSettingsPatch{Builder: &off, Runs: &on}},
		{args: []string{"bulder=true"}, err: "NAME one of runs,"},
		{args: []string{"builder"}, err: "want NAME=true"},
		{args: []string{"builder=yes"}, err: "builder is true or false"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := settingsPatch(tc.args)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want.String(), got.String())
		})
	}
}

func TestWhen(t *testing.T) {
	ts, err := when("--since", "2026-01-02T03:04:05Z")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ts.AsTime())
	ts, err = when("--since", "1h")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(-time.Hour), ts.AsTime(), time.Minute)
	ts, err = when("--since", "")
	require.NoError(t, err)
	require.Nil(t, ts)
	_, err = when("--since", "yesterday")
	require.ErrorContains(t, err, "RFC 3339")
}

// TestMainOffline runs the CLI in process for what needs no service: usage errors exit 2, a token
// is refused on the command line, and a context keeps an absolute token file path.
func TestMainOffline(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"MILLWRIGHT_CONFIG": filepath.Join(dir, "config.json")}
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(t.Context(), args, IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
			Getenv: func(k string) string { return env[k] }})
		return code, out.String(), errOut.String()
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"nonsense"}, ExitError, `unknown command "nonsense"`},
		{[]string{"seats", "--token", "x"}, ExitError, "visible to every local user"},
		{[]string{"check", "flow"}, ExitError, "accepts 1 arg(s)"},
		{[]string{"watch", "nothing"}, ExitError, `invalid argument "nothing"`},
		{[]string{"--context", "nope", "seats"}, ExitError, `no context "nope"`},
		{[]string{"check", "flow", "--action", "publish", "-w", "w", "-"}, ExitError, `--action "publish"`},
	} {
		code, _, stderr := run("{}", tc.args...)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Contains(t, stderr, tc.stderr, "%v", tc.args)
	}

	t.Chdir(dir)
	code, _, stderr := run("", "context", "add", "local", "--token-file", "tok", "--workspace", "demo")
	require.Equal(t, ExitOK, code, stderr)
	code, stdout, _ := run("", "context", "list")
	require.Equal(t, ExitOK, code)
	require.Contains(t, stdout, "file "+filepath.Join(dir, "tok"))
	code, _, stderr = run("mwu_secret\n", "context", "add", "inline", "--token-stdin", "--use")
	require.Equal(t, ExitOK, code, stderr)
	code, stdout, _ = run("", "context", "list")
	require.Equal(t, ExitOK, code)
	require.NotContains(t, stdout, "mwu_secret", "a token is never printed")
	require.Regexp(t, `\* +inline .* set\n`, stdout)
	code, stdout, _ = run("", "context", "current")
	require.Equal(t, ExitOK, code)
	require.Contains(t, stdout, "token: set (context inline)")
	code, _, _ = run("", "context", "remove", "inline")
	require.Equal(t, ExitOK, code)
	code, _, stderr = run("", "context", "use", "inline")
	require.Equal(t, ExitError, code)
	require.Contains(t, stderr, `no context "inline"`)
}
