package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readmeBlock is one ```sh block of the README's walkthrough, with the heading it is under.
type readmeBlock struct {
	heading string
	line    int
	code    string
}

// readmeStep is what the test expects of one walkthrough block, in README order.
type readmeStep struct {
	heading string // a substring of the block's heading
	fails   bool   // the block is meant to end in an error (a refusal)
	retry   bool   // read-only: re-run until check passes (billing's projection follows policy's stream)
	check   func(t *testing.T, out string) error
}

// TestREADMEWalkthrough runs every ```sh block under README.md's "## Walkthrough" headings, in
// order, with `bash -e -o pipefail` from a directory whose .run is the test stack's run
// directory, against a fresh stack (scripts/run.sh, demo included). The README is written
// against the default addresses (localhost:50051 ... localhost:8080); the test redirects those
// to the test stack's ports, and refuses a block that names a default port any other way, so
// no block can reach a developer's own `make run`. Each block's output is checked.
func TestREADMEWalkthrough(t *testing.T) {
	needsStack(t)
	t.Parallel()
	root := repoRoot(t)
	blocks := walkthroughBlocks(t, filepath.Join(root, "README.md"))
	steps := readmeSteps()
	var got []string
	for _, b := range blocks {
		got = append(got, b.heading)
	}
	require.Len(t, blocks, len(steps), "walkthrough blocks (by heading): %q; add an expectation for each block", got)

	grpcurlDir := findGrpcurl(t, root)
	st := StartStack(t)

	wd := t.TempDir()
	require.NoError(t, os.Symlink(st.Dir, filepath.Join(wd, ".run")))
	// bin/millwright, as make run builds it; its addresses are the stack's (the README's
	// blocks rely on the CLI's defaults, make run's), its contexts kept in wd.
	require.NoError(t, os.Symlink(filepath.Dir(st.Bin("millwright")), filepath.Join(wd, "bin")))
	env := append(cleanEnv(), "PATH="+grpcurlDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"MILLWRIGHT_CONFIG="+filepath.Join(wd, "millwright.json"),
		"MILLWRIGHT_POLICY_ADDR="+st.Policy, "MILLWRIGHT_ROLESET_ADDR="+st.Roleset, "MILLWRIGHT_BILLING_ADDR="+st.Billing)
	redirect := strings.NewReplacer(
		"localhost:50051", st.Policy, "localhost:50052", st.Roleset,
		"localhost:50053", st.Billing, "localhost:8080", st.HTTPA)
	defaultPort := regexp.MustCompile(`:(50051|50052|50053|8080)\b`)

	for i, b := range blocks {
		step := steps[i]
		require.Contains(t, b.heading, step.heading, "README.md:%d: block %d is not where the test expects it", b.line, i+1)
		code := redirect.Replace(b.code)
		require.False(t, defaultPort.MatchString(code),
			"README.md:%d: a default port in a form the test does not redirect (write localhost:<port>):\n%s", b.line, b.code)
		ok := t.Run(b.heading, func(t *testing.T) {
			deadline := time.Now().Add(10 * time.Second)
			for {
				out, err := runBlock(t, wd, env, code)
				var problem error
				if step.fails {
					if err == nil {
						problem = fmt.Errorf("the block should fail and did not")
					}
				} else if err != nil {
					problem = fmt.Errorf("%w", err)
				}
				if problem == nil {
					problem = step.check(t, out)
				}
				if problem == nil {
					t.Logf("README.md:%d:\n%s\n---\n%s", b.line, b.code, out)
					return
				}
				if !step.retry || time.Now().After(deadline) {
					t.Fatalf("README.md:%d: %v\nblock:\n%s\noutput:\n%s", b.line, problem, b.code, out)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
		if !ok {
			return // later blocks build on this one
		}
	}
}

func runBlock(t *testing.T, wd string, env []string, code string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", code)
	cmd.Dir = wd
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// walkthroughBlocks returns the ```sh blocks of the "## Walkthrough" section, each with the
// nearest "###" heading above it.
func walkthroughBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var (
		blocks  []readmeBlock
		in      bool // inside the walkthrough section
		heading string
		cur     *readmeBlock
		fence   bool
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil:
			if strings.HasPrefix(line, "```") {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.code += line + "\n"
		case fence:
			fence = !strings.HasPrefix(line, "```")
		case strings.HasPrefix(line, "## "):
			in = strings.HasPrefix(line, "## Walkthrough")
		case strings.HasPrefix(line, "```"):
			if in && strings.TrimSpace(line) == "```sh" {
				cur = &readmeBlock{heading: heading, line: n}
			} else {
				fence = true
			}
		case in && strings.HasPrefix(line, "### "):
			heading = strings.TrimSpace(strings.TrimPrefix(line, "### "))
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "unterminated code block in %s", path)
	require.NotEmpty(t, blocks, "no ```sh blocks under \"## Walkthrough\" in %s", path)
	return blocks
}

// findGrpcurl returns a directory holding grpcurl: the PATH's, the repo's bin/, or one built
// from the Go module proxy into a temporary GOBIN (the version the README names).
func findGrpcurl(t *testing.T, root string) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return filepath.Dir(p)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "grpcurl")); err == nil {
		return filepath.Join(root, "bin")
	}
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4")
	cmd.Dir = gobin
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go install grpcurl: %s", out)
	return gobin
}

// psqlRows returns the (region, item) pairs of psql's aligned output between two markers.
var psqlRow = regexp.MustCompile(`(?m)^ *(emea|apac|amer) *\| *(\w+) *\| *\d+ *$`)

func rowsOf(out string) []string {
	var rows []string
	for _, m := range psqlRow.FindAllStringSubmatch(out, -1) {
		rows = append(rows, m[1]+"/"+m[2])
	}
	return rows
}

// jsonObjects decodes every top-level JSON object in out, in order (curl prints one per call,
// without a newline).
func jsonObjects(out string) ([]map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(out))
	var objs []map[string]any
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if err.Error() == "EOF" {
				return objs, nil
			}
			return objs, err
		}
		objs = append(objs, m)
	}
}

// at walks a decoded JSON object by keys.
func at(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}
