package server_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

// A secret given as a flag is refused (every local user reads a process's arguments), with a
// usage error that names the environment variable and the file variant and does not repeat
// the secret; a connection string is refused only when it carries a password.
func TestSecretFlagsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		refused string // "" when the arguments are accepted
	}{
		{"admin token", []string{"--admin-token", "hunter2"}, "MILLWRIGHT_ADMIN_TOKEN_FILE"},
		{"service token", []string{"--service-token=hunter2"}, "MILLWRIGHT_SERVICE_TOKEN"},
		{"URL with a password", []string{"--database-url", "postgres://app:hunter2@db/x"}, "DATABASE_URL_FILE"},
		{"password query parameter", []string{"--database-url", "postgres://app@db/x?password=hunter2"}, "PGPASSWORD"},
		{"key=value with a password", []string{"--database-url", "host=db user=app password=hunter2"}, "DATABASE_URL"},
		{"unparsable URL", []string{"--database-url", "postgres://app:hunter2@db:port/x%zz"}, "DATABASE_URL"},
		{"URL without a password", []string{"--database-url", "postgres://app@db/x?sslmode=disable"}, ""},
		{"key=value without a password", []string{"--database-url", "host=db user=app"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var cfg server.Config
			cfg.RegisterFlags(fs, server.Config{})
			err := cli.ParseFlags(fs, tc.args)
			if tc.refused == "" {
				require.NoError(t, err)
				require.NotEmpty(t, cfg.DatabaseURL.Reveal())
				return
			}
			var uerr *cli.UsageError
			require.ErrorAs(t, err, &uerr, "want a usage error, got %v", err)
			require.ErrorContains(t, err, tc.refused)
			require.ErrorContains(t, err, "command line")
			require.NotContains(t, err.Error(), "hunter2", "the refusal repeats the secret")
			require.Empty(t, cfg.AdminToken.Reveal()+cfg.ServiceToken.Reveal()+cfg.DatabaseURL.Reveal(), "a refused value was kept")
		})
	}
}

// Secrets come from the environment or from the file its _FILE variable names (one of them:
// both is a mistake), with the file's trailing newline dropped.
func TestSecretsFromEnvironmentOrFile(t *testing.T) {
	dir := t.TempDir()
	tokFile, urlFile := filepath.Join(dir, "token"), filepath.Join(dir, "url")
	require.NoError(t, os.WriteFile(tokFile, []byte("from-file\n"), 0o600))
	require.NoError(t, os.WriteFile(urlFile, []byte("postgres://app:pw@db/x\n"), 0o600))
	t.Setenv("MILLWRIGHT_ADMIN_TOKEN_FILE", tokFile)
	t.Setenv("DATABASE_URL_FILE", urlFile)
	t.Setenv("MILLWRIGHT_SERVICE_TOKEN", "from-env")

	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg server.Config
	cfg.RegisterFlags(fs, server.Config{})
	require.NoError(t, cli.ParseFlags(fs, nil))
	require.Equal(t, "from-file", cfg.AdminToken.Reveal())
	require.Equal(t, "from-env", cfg.ServiceToken.Reveal())
	require.Equal(t, "postgres://app:pw@db/x", cfg.DatabaseURL.Reveal())

	t.Setenv("MILLWRIGHT_ADMIN_TOKEN", "also-env")
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg = server.Config{}
	cfg.RegisterFlags(fs, server.Config{})
	require.ErrorContains(t, cli.ParseFlags(fs, nil), "set MILLWRIGHT_ADMIN_TOKEN or MILLWRIGHT_ADMIN_TOKEN_FILE, not both")

	t.Setenv("MILLWRIGHT_ADMIN_TOKEN", "")
	t.Setenv("MILLWRIGHT_ADMIN_TOKEN_FILE", filepath.Join(dir, "missing"))
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg = server.Config{}
	cfg.RegisterFlags(fs, server.Config{})
	require.ErrorContains(t, cli.ParseFlags(fs, nil), "MILLWRIGHT_ADMIN_TOKEN_FILE")
}
