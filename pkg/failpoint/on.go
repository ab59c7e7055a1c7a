//go:build failpoints

package failpoint

import (
	"os"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with the failpoints tag.
const Enabled = true

// armed is the failpoint this process was started with (read once: a failpoint is the
// process's fate, not a switch to flip at runtime), and hits counts its hits so far.
var (
	armedName, armedNth = parseArmed(os.Getenv(EnvVar))
	hits                atomic.Int64
)

// Hit SIGKILLs the process when name is the armed failpoint and this is its armed hit.
func Hit(name string) {
	if armedName == "" || name != armedName {
		return
	}
	if hits.Add(1) != int64(armedNth) {
		return
	}
	// Exactly a crash: the kernel ends the process; nothing of ours runs after this.
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered before this goroutine runs again
}
