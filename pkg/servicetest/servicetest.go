package servicetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
)

// BuildPolicy builds the policy command into a temporary directory and returns its path.
func BuildPolicy(t testing.TB) string { return Build(t, "./services/policy/cmd/policy") }

// Build builds the command at pkg (a path from the repository root, e.g.
// "./services/roleset/cmd/roleset") with the extra go build flags (e.g. "-tags=failpoints",
// the fault build) into a temporary directory and returns its path. It builds inside the Go
// workspace (found from the test's directory), so the service modules resolve; the build cache
// makes repeat builds quick.
func Build(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.work above the test's directory")
		dir = parent
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), pkg)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, out)
	return bin
}

// Bearer returns a context whose outgoing calls carry "authorization: Bearer token" (none when
// token is empty).
func Bearer(token string) context.Context {
	if token == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// Metric reads one sample (its name with its labels, as printed) from a /metrics page.
func Metric(t testing.TB, metricsAddr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no %s on /metrics", sample)
	return 0
}

// NewUUID returns a random (version 4) UUID, the form of a run's job id.
func NewUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// WaitTokenCached calls call (a refused call made with one policy token) until the service at
// metricsAddr answers it from its token cache (the cache's hit counter moves and entriesSample
// is positive), so that a refusal that follows is the stream's invalidation and not a miss. No
// other policy token may be in use meanwhile.
func WaitTokenCached(t testing.TB, metricsAddr, entriesSample string, call func() bool) {
	t.Helper()
	hits := func() float64 {
		return Metric(t, metricsAddr, `millwright_cache_lookups_total{cache="tokens",result="hit"}`)
	}
	require.Eventually(t, func() bool {
		before := hits()
		return call() && hits() > before
	}, 10*time.Second, 20*time.Millisecond, "the token's identity was never cached")
	require.Positive(t, Metric(t, metricsAddr, entriesSample))
}

// RefusedWithin waits (5 s at most) until call reports the token refused, and logs how long it
// took: far below the token cache's TTL when the stream delivers the revoke.
func RefusedWithin(t testing.TB, call func() bool) {
	t.Helper()
	start := time.Now()
	require.Eventually(t, call, 5*time.Second, 10*time.Millisecond, "still authenticated (the cache TTL is 30 s)")
	t.Logf("refused after %v", time.Since(start).Round(time.Millisecond))
}
