package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNoSecretOnCommandLines starts the stack as `make run` does and samples the command line
// of every process on the machine (/proc/*/cmdline, readable by every local user, which is
// what ps shows) from before run.sh starts until the demo is loaded: the services, the
// gateway, the demo loader, each migrate and psql run and the Postgres server. None may
// carry a secret run.sh made: the Postgres superuser password, the admin and service tokens,
// the encryption key, the demo admin's password.
func TestNoSecretOnCommandLines(t *testing.T) {
	needsStack(t)
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	sample := func() {
		paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil || len(b) == 0 {
				continue // gone, or a kernel thread
			}
			mu.Lock()
			seen[strings.ReplaceAll(string(b), "\x00", " ")] = true
			mu.Unlock()
		}
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			sample()
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	st := StartStack(t)
	close(stop)
	<-stopped
	sample()

	// The sampler saw the stack: every long-running process of it.
	for _, want := range []string{st.Bin("policy") + " serve", st.Bin("roleset") + " serve",
		st.Bin("billing") + " serve", st.Bin("gateway") + " serve", filepath.Join(st.Dir, "pg")} {
		found := false
		for cl := range seen {
			found = found || strings.Contains(cl, want)
		}
		require.True(t, found, "no process with %q on its command line was seen", want)
	}

	secrets := map[string]string{}
	for _, name := range []string{"pg-password", "admin-token", "service-token", "encryption-key", "demo-admin-password"} {
		v := st.Token(t, name)
		require.GreaterOrEqual(t, len(v), 16, "%s looks too short to be a generated secret", name)
		secrets[name] = v
	}
	secrets["encryption-key (key part)"] = strings.TrimPrefix(secrets["encryption-key"], "k1:")
	t.Logf("%d distinct command lines sampled", len(seen))
	redact := func(cl string) string {
		for name, v := range secrets {
			cl = strings.ReplaceAll(cl, v, "<"+name+">")
		}
		return cl
	}
	for cl := range seen {
		for name, v := range secrets {
			if strings.Contains(cl, v) {
				t.Errorf("the %s is on a command line: %s", name, redact(cl))
			}
		}
	}
}
