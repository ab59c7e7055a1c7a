package server_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

func TestConfigPrecedence(t *testing.T) {
	defaults := server.Config{Name: "policy", GRPCAddr: ":9001", MetricsAddr: ":9101", ShutdownTimeout: 5 * time.Second}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want server.Config
	}{
		{"defaults", nil, nil, server.Config{Name: "policy", GRPCAddr: ":9001", MetricsAddr: ":9101",
			LogLevel: "info", LogFormat: "json", ShutdownTimeout: 5 * time.Second, Limits: server.DefaultLimits(), Audit: server.DefaultAudit()}},
		{"env beats default", map[string]string{
			"MILLWRIGHT_GRPC_ADDR": ":7001", "DATABASE_URL": "postgres://db/x", "MILLWRIGHT_SHUTDOWN_TIMEOUT": "9s",
			"MILLWRIGHT_ADMIN_TOKEN": "adm", "MILLWRIGHT_LOG_LEVEL": "debug",
		}, nil, server.Config{Name: "policy", GRPCAddr: ":7001", MetricsAddr: ":9101", DatabaseURL: "postgres://db/x",
			LogLevel: "debug", LogFormat: "json", ShutdownTimeout: 9 * time.Second, AdminToken: "adm",
			Limits: server.DefaultLimits(), Audit: server.DefaultAudit()}},
		{"flag beats env", map[string]string{"MILLWRIGHT_GRPC_ADDR": ":7001", "MILLWRIGHT_LOG_LEVEL": "debug"},
			[]string{"--grpc-addr", ":8001", "--log-level=warn", "--metrics-addr="},
			server.Config{Name: "policy", GRPCAddr: ":8001", LogLevel: "warn", LogFormat: "json",
				ShutdownTimeout: 5 * time.Second, Limits: server.DefaultLimits(), Audit: server.DefaultAudit()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var cfg server.Config
			cfg.RegisterFlags(fs, defaults)
			require.NoError(t, cli.ParseFlags(fs, tc.args))
			assert.Equal(t, tc.want, cfg)
		})
	}
}

func TestExtraFlagHelpers(t *testing.T) {
	t.Setenv("MILLWRIGHT_X_BOOL", "true")
	t.Setenv("MILLWRIGHT_X_INT", "7")
	t.Setenv("MILLWRIGHT_X_SECRET", "s3") // a secret comes from the environment, never a flag
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var (
		b   bool
		n   int
		s   string
		d   time.Duration
		sec server.Secret
	)
	server.BoolVar(fs, &b, "x-bool", "MILLWRIGHT_X_BOOL", false, "")
	server.IntVar(fs, &n, "x-int", "MILLWRIGHT_X_INT", 1, "")
	server.StringVar(fs, &s, "x-str", "", "def", "")
	server.DurationVar(fs, &d, "x-dur", "MILLWRIGHT_X_DUR", time.Minute, "")
	server.SecretVar(fs, &sec, "x-secret", "MILLWRIGHT_X_SECRET", "", "")
	require.NoError(t, cli.ParseFlags(fs, []string{"--x-int", "8"}))
	assert.True(t, b)
	assert.Equal(t, 8, n)
	assert.Equal(t, "def", s)
	assert.Equal(t, time.Minute, d)
	assert.Equal(t, "s3", sec.Reveal())
}

func TestSecretNeverPrints(t *testing.T) {
	s := server.Secret("hunter2")
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "s", s)
	j, err := json.Marshal(struct{ S server.Secret }{s})
	require.NoError(t, err)
	for _, out := range []string{s.String(), fmt.Sprint(s), fmt.Sprintf("%v %s %q %#v", s, s, s, s), buf.String(), string(j)} {
		assert.NotContains(t, out, "hunter2")
	}
	assert.Empty(t, server.Secret("").String(), "unset stays visible as unset")
}

func TestRedactDSN(t *testing.T) {
	cases := map[string]string{
		"postgres://app:hunter2@db:5432/policy?sslmode=disable": "postgres://app:xxxxx@db:5432/policy?sslmode=disable",
		"postgres://app@db/policy?password=hunter2&x=1":         "postgres://app@db/policy?password=xxxxx&x=1",
		"host=db user=app password=hunter2 dbname=policy":       "host=db user=app password=xxxxx dbname=policy",
		"host=db password='hun ter2' dbname=policy":             "host=db password=xxxxx dbname=policy",
		"postgres://db/policy":                                  "postgres://db/policy",
		"postgres://app:hunter2@db:notaport/policy":             "[redacted]",
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			assert.Equal(t, want, server.RedactDSN(in))
			assert.NotContains(t, server.DSN(in).String(), "hunter2")
		})
	}
}

func TestLogConfig(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://app:dbpass@db/policy")
	t.Setenv("MILLWRIGHT_SERVICE_TOKEN", "svc-tok-value")
	t.Setenv("MILLWRIGHT_ADMIN_TOKEN", "adm-tok-value")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg server.Config
	cfg.RegisterFlags(fs, server.Config{GRPCAddr: ":9001"})
	plainKey := fs.String("api-key", "", "a plain flag that looks secret")
	plainURL := fs.String("upstream", "", "a plain flag holding a URL")
	require.NoError(t, cli.ParseFlags(fs, []string{"--api-key", "k-value", "--upstream", "https://u:urlpass@h/"}))
	require.Equal(t, "k-value", *plainKey)
	require.NotEmpty(t, *plainURL)

	var buf bytes.Buffer
	server.LogConfig(slog.New(slog.NewJSONHandler(&buf, nil)), fs)
	out := buf.String()
	for _, secret := range []string{"dbpass", "svc-tok-value", "adm-tok-value", "k-value", "urlpass"} {
		assert.NotContains(t, out, secret)
	}

	var line struct {
		Flags  map[string]string `json:"flags"`
		Source map[string]string `json:"source"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	assert.Equal(t, ":9001", line.Flags["grpc-addr"])
	assert.Equal(t, "postgres://app:xxxxx@db/policy", line.Flags["database-url"])
	assert.Equal(t, "[redacted]", line.Flags["admin-token"])
	assert.Equal(t, "env", line.Source["database-url"])
	assert.Equal(t, "env", line.Source["admin-token"])
	assert.Equal(t, "default", line.Source["grpc-addr"])

	// Usage text shows environment values as defaults; secrets must not appear there either.
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	assert.NotContains(t, usage.String(), "svc-tok-value")
	assert.NotContains(t, usage.String(), "dbpass")
	assert.Contains(t, usage.String(), "MILLWRIGHT_SERVICE_TOKEN")
}
