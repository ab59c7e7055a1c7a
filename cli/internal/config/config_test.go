package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/cli/internal/config"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestResolvePrecedence(t *testing.T) {
	file := &config.File{Current: "prod", Contexts: []config.Context{
		{Name: "prod", PolicyAddr: "prod:1", RolesetAddr: "prod:2", Token: "ctx-token", Workspace: "acme"},
		{Name: "stage", PolicyAddr: "stage:1", TokenFile: "/stage/token"},
	}}
	for _, tc := range []struct {
		name      string
		flags     config.Flags
		env       map[string]string
		context   string
		policy    config.Setting
		roleset   config.Setting
		billing   config.Setting
		workspace config.Setting
		token     string
	}{
		{name: "context file's current", context: "prod",
			policy: config.Setting{Value: "prod:1", Source: "context prod"}, roleset: config.Setting{Value: "prod:2", Source: "context prod"},
			billing: config.Setting{Value: config.DefaultBillingAddr, Source: "default"}, workspace: config.Setting{Value: "acme", Source: "context prod"},
			token: "set (context prod)"},
		{name: "environment over context", context: "prod",
			env:    map[string]string{config.EnvPolicyAddr: "env:1", config.EnvToken: "env-token", config.EnvWorkspace: "w2"},
			policy: config.Setting{Value: "env:1", Source: "env"}, roleset: config.Setting{Value: "prod:2", Source: "context prod"},
			billing: config.Setting{Value: config.DefaultBillingAddr, Source: "default"}, workspace: config.Setting{Value: "w2", Source: "env"},
			token: "set (env)"},
		{name: "flags over environment", context: "prod",
			flags:  config.Flags{PolicyAddr: "flag:1", TokenFile: "/flag/token", Workspace: "w3"},
			env:    map[string]string{config.EnvPolicyAddr: "env:1", config.EnvToken: "env-token", config.EnvWorkspace: "w2"},
			policy: config.Setting{Value: "flag:1", Source: "flag"}, roleset: config.Setting{Value: "prod:2", Source: "context prod"},
			billing: config.Setting{Value: config.DefaultBillingAddr, Source: "default"}, workspace: config.Setting{Value: "w3", Source: "flag"},
			token: "file /flag/token (flag)"},
		{name: "context from the environment", context: "stage",
			env:    map[string]string{config.EnvContext: "stage"},
			policy: config.Setting{Value: "stage:1", Source: "context stage"}, roleset: config.Setting{Value: config.DefaultRolesetAddr, Source: "default"},
			billing: config.Setting{Value: config.DefaultBillingAddr, Source: "default"}, token: "file /stage/token (context stage)"},
		{name: "context flag over environment", context: "prod",
			flags:  config.Flags{Context: "prod"},
			env:    map[string]string{config.EnvContext: "stage", config.EnvTokenFile: "/env/token"},
			policy: config.Setting{Value: "prod:1", Source: "context prod"}, roleset: config.Setting{Value: "prod:2", Source: "context prod"},
			billing: config.Setting{Value: config.DefaultBillingAddr, Source: "default"}, workspace: config.Setting{Value: "acme", Source: "context prod"},
			token: "file /env/token (env)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := config.Resolve(tc.flags, env(tc.env), file)
			require.NoError(t, err)
			assert.Equal(t, tc.context, r.Context)
			assert.Equal(t, tc.policy, r.PolicyAddr)
			assert.Equal(t, tc.roleset, r.RolesetAddr)
			assert.Equal(t, tc.billing, r.BillingAddr)
			assert.Equal(t, tc.workspace, r.Workspace)
			assert.Equal(t, tc.token, r.TokenSource())
		})
	}

	t.Run("no config: make run's defaults", func(t *testing.T) {
		r, err := config.Resolve(config.Flags{}, env(nil), &config.File{})
		require.NoError(t, err)
		assert.Equal(t, config.DefaultPolicyAddr, r.PolicyAddr.Value)
		assert.Equal(t, "unset", r.TokenSource())
		tok, err := r.Token()
		require.NoError(t, err)
		assert.Empty(t, tok)
	})
	t.Run("an unknown context is an error, not the defaults", func(t *testing.T) {
		_, err := config.Resolve(config.Flags{Context: "prdo"}, env(nil), file)
		require.ErrorContains(t, err, `no context "prdo"`)
	})
}

// TestFileModes: a token is never read from a file other users can read, and the CLI writes
// its config so that they cannot.
func TestFileModes(t *testing.T) {
	dir := t.TempDir()
	withToken := &config.File{Current: "a", Contexts: []config.Context{{Name: "a", Token: "s3cret"}}}
	withoutToken := &config.File{Contexts: []config.Context{{Name: "a", TokenFile: "/x"}}}

	for _, tc := range []struct {
		name    string
		file    *config.File
		mode    os.FileMode
		refused bool
	}{
		{"token, 0600", withToken, 0o600, false},
		{"token, group-readable", withToken, 0o640, true},
		{"token, world-readable", withToken, 0o604, true},
		{"no token, world-readable", withoutToken, 0o644, false},
	} {
		t.Run("config "+tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "config.json")
			require.NoError(t, config.Save(path, tc.file))
			st, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "Save writes 0600")
			require.NoError(t, os.Chmod(path, tc.mode))
			got, err := config.Load(path)
			if tc.refused {
				require.ErrorContains(t, err, "chmod 600")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.file, got)
		})
	}
	for _, tc := range []struct {
		mode    os.FileMode
		refused bool
	}{{0o600, false}, {0o400, false}, {0o640, true}, {0o644, true}} {
		t.Run("token file "+tc.mode.String(), func(t *testing.T) {
			path := filepath.Join(dir, "token")
			require.NoError(t, os.WriteFile(path, []byte("mwu_abc\n"), tc.mode))
			require.NoError(t, os.Chmod(path, tc.mode))
			r, err := config.Resolve(config.Flags{TokenFile: path}, env(nil), &config.File{})
			require.NoError(t, err)
			tok, err := r.Token()
			if tc.refused {
				require.ErrorContains(t, err, "readable by others")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "mwu_abc", tok)
			require.NoError(t, os.Remove(path))
		})
	}
	t.Run("missing config file is empty", func(t *testing.T) {
		f, err := config.Load(filepath.Join(dir, "none.json"))
		require.NoError(t, err)
		assert.Empty(t, f.Contexts)
	})
}

func TestPath(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{config.EnvConfig: "/c.json", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/c.json"},
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/millwright/config.json"},
		{map[string]string{"HOME": "/h"}, "/h/.config/millwright/config.json"},
	} {
		got, err := config.Path(env(tc.env))
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
}
