package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The binaries the images carry, built from the repository the way the Dockerfile builds them.
// The manifests name them by their path in the image (/usr/local/bin/<name>, /grpcprobe).
var (
	serviceCmds = map[string]string{
		"policy":  "./services/policy/cmd/policy",
		"roleset": "./services/roleset/cmd/roleset",
		"billing": "./services/billing/cmd/billing",
		"gateway": "./gateway/cmd/gateway",
	}
	binDir     string
	buildOnce  sync.Once
	buildErr   error
	helpMu     sync.Mutex
	helpCache  = map[string]*help{}
	repoRoot   = mustAbs("..")
	deployRoot = mustAbs(".")
)

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "millwright-deploy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goEnv is the environment for the child builds. The services are other modules of the
// workspace, so their build needs go.work: GOWORK=off (how one may run this module alone) is
// dropped for it. The probe is built with GOWORK=off, exactly as the Dockerfile does.
func goEnv(workspace bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GOWORK=") && (!workspace || kv == "GOWORK=off") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "CGO_ENABLED=0")
	if !workspace {
		env = append(env, "GOWORK=off")
	}
	return env
}

func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		args := []string{"build", "-o", binDir + string(os.PathSeparator)}
		for _, name := range []string{"policy", "roleset", "billing", "gateway"} {
			args = append(args, serviceCmds[name])
		}
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = repoRoot, goEnv(true)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build services: %w\n%s", err, out)
			return
		}
		cmd = exec.Command("go", "build", "-o", filepath.Join(binDir, "grpcprobe"), "./grpcprobe")
		cmd.Dir, cmd.Env = deployRoot, goEnv(false)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build grpcprobe: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binDir
}

// flagInfo is one flag as the binary's -h prints it.
type flagInfo struct {
	name       string
	takesValue bool   // false for boolean flags ("-x" alone)
	env        string // its environment fallback, from "(env NAME)"
	def        string // its default, from "(default X)"
}

// help is what `<binary> <subcommands...> -h` says.
type help struct {
	flags map[string]flagInfo
	envs  map[string]string // environment variable -> flag
}

var (
	flagLine  = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_.-]*)(?: ([^\t]+))?(?:\t(.*))?$`)
	envRe     = regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)
	defaultRe = regexp.MustCompile(`\(default (.*)\)\s*$`)
)

// binaryHelp runs `<bin> <sub...> -h` and parses Go's flag.PrintDefaults format. A missing
// subcommand makes the binary print its command list instead: that is a failure here.
func binaryHelp(t *testing.T, bin string, sub []string) *help {
	t.Helper()
	dir := buildBinaries(t)
	key := bin + " " + strings.Join(sub, " ")
	helpMu.Lock()
	defer helpMu.Unlock()
	if h, ok := helpCache[key]; ok {
		return h
	}
	cmd := exec.Command(filepath.Join(dir, bin), append(append([]string{}, sub...), "-h")...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir()} // no MILLWRIGHT_* from the caller
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s -h failed (does the subcommand exist?):\n%s", key, out)
	h := &help{flags: map[string]flagInfo{}, envs: map[string]string{}}
	var cur *flagInfo
	finish := func() {
		if cur == nil {
			return
		}
		h.flags[cur.name] = *cur
		if cur.env != "" {
			h.envs[cur.env] = cur.name
		}
		cur = nil
	}
	var usage strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			if cur != nil {
				parseUsage(cur, usage.String())
			}
			finish()
			usage.Reset()
			cur = &flagInfo{name: m[1], takesValue: m[2] != ""}
			usage.WriteString(m[3])
			continue
		}
		if cur != nil && strings.HasPrefix(line, "    \t") {
			usage.WriteString(" " + strings.TrimSpace(line))
		}
	}
	if cur != nil {
		parseUsage(cur, usage.String())
	}
	finish()
	require.NotEmpty(t, h.flags, "%s -h printed no flags:\n%s", key, out)
	helpCache[key] = h
	return h
}

func parseUsage(f *flagInfo, usage string) {
	if m := envRe.FindStringSubmatch(usage); m != nil {
		f.env = m[1]
	}
	if m := defaultRe.FindStringSubmatch(usage); m != nil {
		d := m[1]
		if len(d) >= 2 && d[0] == '"' {
			var s string
			if json.Unmarshal([]byte(d), &s) == nil {
				d = s
			}
		}
		f.def = d
	}
}

// invocation is a container's argv split the way the binaries read it.
type invocation struct {
	bin   string            // base name of argv[0]
	sub   []string          // leading positional arguments: the subcommand
	flags map[string]string // flags given, name -> value ("true" for a bare boolean)
}

// parseInvocation checks every flag in argv against the binary's help and returns them.
func parseInvocation(t *testing.T, where string, argv []string) (invocation, *help) {
	t.Helper()
	require.NotEmpty(t, argv, "%s: no command", where)
	inv := invocation{bin: filepath.Base(argv[0]), flags: map[string]string{}}
	i := 1
	for i < len(argv) && !strings.HasPrefix(argv[i], "-") {
		inv.sub = append(inv.sub, argv[i])
		i++
	}
	h := binaryHelp(t, inv.bin, inv.sub)
	for ; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: unexpected positional argument %q in %q", where, a, argv)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := h.flags[name]
		if !ok {
			t.Errorf("%s: flag -%s is not a flag of `%s %s` (its -h lists %v)", where, name, inv.bin, strings.Join(inv.sub, " "), keys(h.flags))
			continue
		}
		if f.takesValue && !hasVal {
			if i+1 >= len(argv) {
				t.Errorf("%s: flag -%s needs a value", where, name)
				continue
			}
			i++
			val = argv[i]
		} else if !hasVal {
			val = "true"
		}
		inv.flags[name] = val
	}
	return inv, h
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Environment variables a container may set that no millwright flag reads: the OpenTelemetry
// SDK's own (read by pkg/server's exporter) and the Go runtime's.
func allowedForeignEnv(name string) bool {
	switch name {
	case "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK", "TZ":
		return true
	}
	return strings.HasPrefix(name, "OTEL_")
}

// secretName is what must never be given as a literal (env value, ConfigMap key) or a flag:
// flags show in the pod spec and in `ps`.
var secretName = regexp.MustCompile(`(?i)token|key|password|passwd|secret|credential|database_url|database-url|dsn`)

// credentialInURL catches a connection string with a password in any literal value.
var credentialInURL = regexp.MustCompile(`://[^/@\s:]+:[^/@\s]+@`)

// effective returns a flag's value as the binary will see it: the flag, else its environment
// variable (values has the literal ones), else the default.
func effective(f flagInfo, inv invocation, values map[string]string) (string, bool) {
	if v, ok := inv.flags[f.name]; ok {
		return v, true
	}
	if v, ok := values[f.env]; ok && f.env != "" {
		return v, true
	}
	return f.def, false
}

// checkConfig applies the rules shared by Kubernetes and Compose to one container: every
// environment variable is one the binary reads, no listen or dial address is left at a
// loopback default (wrong in any container), and no secret is passed as a flag.
func checkConfig(t *testing.T, where string, inv invocation, h *help, envNames []string, values map[string]string) {
	t.Helper()
	for _, n := range envNames {
		if _, ok := h.envs[n]; !ok && !allowedForeignEnv(n) {
			t.Errorf("%s: environment variable %s is not read by `%s %s` (it reads %v)", where, n, inv.bin, strings.Join(inv.sub, " "), keys(h.envs))
		}
	}
	for name := range inv.flags {
		if secretName.MatchString(name) {
			t.Errorf("%s: secret flag -%s on the command line; use its environment variable from a Secret", where, name)
		}
	}
	for _, f := range h.flags {
		v, set := effective(f, inv, values)
		if !set && (strings.Contains(f.def, "127.0.0.1") || strings.Contains(f.def, "localhost")) {
			t.Errorf("%s: -%s (env %s) is left at its loopback default %q, which is wrong in a container", where, f.name, f.env, v)
		}
	}
}

// addrPort is the port of a host:port or :port address.
func addrPort(addr string) string {
	_, p, err := net.SplitHostPort(strings.TrimPrefix(addr, "dns:///"))
	if err != nil {
		return ""
	}
	return p
}
