package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

type composeService struct {
	Image       string            `yaml:"image"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Networks map[string]*struct {
		Aliases []string `yaml:"aliases"`
	} `yaml:"networks"`
	Profiles []string `yaml:"profiles"`
	Ports    []string `yaml:"ports"` // docker-compose 1.29 normalizes them to [ip:]host:container[/proto]
}

// published returns the host address ("127.0.0.1:5433") a service publishes container port
// port on, or "".
func (s composeService) published(port string) string {
	for _, p := range s.Ports {
		p, _, _ = strings.Cut(p, "/")
		i := strings.LastIndex(p, ":")
		if i < 0 || p[i+1:] != port {
			continue
		}
		host := p[:i]
		if !strings.Contains(host, ":") {
			host = "0.0.0.0:" + host
		}
		return host
	}
	return ""
}

// TestCompose validates deploy/compose.yaml with docker-compose itself, then checks the
// normalized result: two healthy-checked replicas per service behind one alias, a migrate
// run per service on the same database, roleset's PostgreSQL proxy published on the host
// address it advertises, and every flag and environment variable (including the /grpcprobe
// health checks) against the binaries.
func TestCompose(t *testing.T) {
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose not installed (CI installs Debian's: apt-get install -y docker-compose); skipping the Compose check")
	}
	targets := dockerfileTargets(t)
	var stderr bytes.Buffer
	cmd := exec.Command(dc, "-f", filepath.Join(deployRoot, "compose.yaml"), "config")
	cmd.Stderr = &stderr
	// The file's ${VAR:-default}s must resolve by themselves: render without the caller's
	// overrides.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MILLWRIGHT_") && !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "POSTGRES_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	require.NoError(t, err, "docker-compose config: %s", stderr.String())
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(out, &doc))
	require.NotEmpty(t, doc.Services)

	replicas := map[string]int{} // alias -> healthy-checked serve replicas
	serveDB := map[string]string{}
	migrateDB := map[string]string{}
	for name, s := range doc.Services {
		where := "compose service " + name
		target := ourImage(s.Image)
		if target == "" {
			continue
		}
		dt, ok := targets[target]
		require.True(t, ok, "%s: image %s has no Dockerfile target", where, s.Image)
		entry := s.Entrypoint
		if len(entry) == 0 {
			entry = dt.entrypoint
		}
		inv, h := parseInvocation(t, where, append(append([]string{}, entry...), s.Command...))
		names := make([]string, 0, len(s.Environment))
		values := map[string]string{}
		for k, v := range s.Environment {
			names = append(names, k)
			if v != "" {
				values[k] = v
			}
		}
		checkConfig(t, where, inv, h, names, values)
		switch strings.Join(inv.sub, " ") {
		case "migrate":
			migrateDB[inv.bin] = values["DATABASE_URL"]
		case "serve":
			require.NotNil(t, s.Healthcheck, "%s: no healthcheck", where)
			test := s.Healthcheck.Test
			require.True(t, len(test) >= 2 && test[0] == "CMD", "%s: healthcheck must be [CMD, /grpcprobe, ...] (no shell in the image)", where)
			require.Contains(t, dt.files, test[1], "%s: %s is not in the image", where, test[1])
			pinv, _ := parseInvocation(t, where+" healthcheck", test[1:])
			if _, grpc := h.flags["grpc-addr"]; grpc {
				v, _ := effective(h.flags["grpc-addr"], inv, values)
				require.Equal(t, addrPort(v), addrPort(pinv.flags["addr"]), "%s: the health check must ask the gRPC port", where)
				serveDB[inv.bin] = values["DATABASE_URL"]
				if f, ok := h.flags["proxy-addr"]; ok {
					addr, _ := effective(f, inv, values)
					port := addrPort(addr)
					require.NotEmpty(t, port, "%s: -proxy-addr (env %s) is %q: the PostgreSQL proxy must listen on a port", where, f.env, addr)
					pub := s.published(port)
					require.NotEmpty(t, pub, "%s: the proxy port %s is not published", where, port)
					adv, _ := effective(h.flags["proxy-advertise"], inv, values)
					require.Equal(t, pub, adv, "%s: -proxy-advertise must be the host address the proxy port is published on", where)
				}
				for _, n := range s.Networks {
					if n != nil {
						for _, a := range n.Aliases {
							replicas[a]++
						}
					}
				}
			}
		}
	}
	for _, svc := range []string{"policy", "roleset", "billing"} {
		require.GreaterOrEqual(t, replicas[svc], 2, "compose: %s needs two replicas sharing the alias %q", svc, svc)
		require.NotEmpty(t, migrateDB[svc], "compose: no `%s migrate` service", svc)
		require.Equal(t, serveDB[svc], migrateDB[svc], "compose: %s migrates a different database than it serves", svc)
	}
}
