package failpoint

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseArmed(t *testing.T) {
	for _, tc := range []struct {
		in   string
		name string
		n    int
	}{
		{"", "", 1},
		{"a/b", "a/b", 1},
		{"a/b:3", "a/b", 3},
		{" a/b:2 ", "a/b", 2},
		{"a/b:0", "", 0},
		{"a/b:x", "", 0},
		{"a/b:-1", "", 0},
	} {
		t.Run(tc.in, func(t *testing.T) {
			name, n := parseArmed(tc.in)
			require.Equal(t, tc.name, name)
			if tc.name != "" {
				require.Equal(t, tc.n, n)
			}
		})
	}
	require.Equal(t, EnvVar+"=x:1", Arm("x", 0))
}

// TestKill builds testdata/crash with and without the tag and checks that only the fault
// build dies, by SIGKILL, on exactly the armed hit.
func TestKill(t *testing.T) {
	dir := t.TempDir()
	build := func(tags ...string) string {
		bin := filepath.Join(dir, "crash"+strings.Join(tags, ""))
		args := append([]string{"build", "-o", bin}, tags...)
		out, err := exec.Command("go", append(args, "./testdata/crash")...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return bin
	}
	fault, plain := build("-tags=failpoints"), build()
	for _, tc := range []struct {
		bin, arm string
		out      string
		killed   bool
	}{
		{fault, "test/step", "1\n", true},
		{fault, "test/step:2", "1\n2\n", true},
		{fault, "test/other:3", "1\n2\n3\n", true},
		{fault, "test/step:4", "1\n2\n3\ndone\n", false},
		{fault, "nope", "1\n2\n3\ndone\n", false},
		{fault, "", "1\n2\n3\ndone\n", false},
		{plain, "test/step", "1\n2\n3\ndone\n", false},
	} {
		t.Run(filepath.Base(tc.bin)+"/"+tc.arm, func(t *testing.T) {
			cmd := exec.Command(tc.bin)
			cmd.Env = append(os.Environ(), EnvVar+"="+tc.arm)
			out, err := cmd.Output()
			require.Equal(t, tc.out, string(out))
			if !tc.killed {
				require.NoError(t, err)
				return
			}
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			ws := ee.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%v", err)
		})
	}
}

func TestSites(t *testing.T) {
	got, err := Sites("testdata")
	require.NoError(t, err)
	require.Equal(t, []string{"test/other", "test/step"}, got)
}

func TestCheckNames(t *testing.T) {
	require.NoError(t, CheckNames([]string{"test/step", "test/other"}, "testdata"))
	err := CheckNames([]string{"test/step", "test/gone"}, "testdata")
	require.ErrorContains(t, err, "sites not listed: [test/other]; listed without a site: [test/gone]")
}
