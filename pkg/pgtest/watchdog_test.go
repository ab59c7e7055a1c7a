package pgtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const helperEnv = "PGTEST_WATCHDOG_HELPER"

// TestWatchdogHelper runs only in the child process started by TestWatchdog: it starts the
// cluster, reports where it is, and dies without running Main's cleanup.
func TestWatchdogHelper(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("run as a child process by TestWatchdog")
	}
	s := get(t)
	pid, err := postmasterPID(s.cluster.dataDir())
	require.NoError(t, err)
	fmt.Printf("PGTEST_DIR=%s\nPGTEST_PID=%d\n", s.cluster.dir, pid)
	switch mode {
	case "exit":
		os.Exit(1)
	case "panic":
		panic("pgtest helper dies without cleanup")
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	t.Fatalf("unknown mode %q", mode)
}

func TestWatchdog(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the helper process")
	}
	if os.Getenv("TEST_DATABASE_URL") != "" {
		t.Skip("TEST_DATABASE_URL: no cluster of our own to watch")
	}
	for _, mode := range []string{"exit", "panic", "kill"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.Error(t, cmd.Run(), "the helper was meant to die")

			vars := map[string]string{}
			sc := bufio.NewScanner(&stdout)
			for sc.Scan() {
				if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "PGTEST_") {
					vars[k] = v
				}
			}
			dir := vars["PGTEST_DIR"]
			pid, err := strconv.Atoi(vars["PGTEST_PID"])
			require.NoError(t, err, "helper output:\n%s\n%s", stdout.String(), stderr.String())
			require.NotEmpty(t, dir)

			require.Eventually(t, func() bool { return !running(pid) }, 10*time.Second, 50*time.Millisecond,
				"postmaster %d still running after its test process died", pid)
			require.Eventually(t, func() bool {
				_, err := os.Stat(dir)
				return os.IsNotExist(err)
			}, 10*time.Second, 50*time.Millisecond, "%s still exists after its test process died", dir)
		})
	}
}

func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// running reports whether pid is a live process. A zombie counts as gone: whether it is reaped
// depends on the container's init, not on us.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs (not Linux): trust kill -0
	}
	// The state follows the parenthesised command name, which may itself contain spaces.
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	return !bytes.HasPrefix(bytes.TrimSpace(rest), []byte("Z"))
}
