package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Defaults are scripts/run.sh's addresses, so that `make run` needs no configuration.
const (
	DefaultPolicyAddr  = "127.0.0.1:50051"
	DefaultRolesetAddr = "127.0.0.1:50052"
	DefaultBillingAddr = "127.0.0.1:50053"
)

// Environment variables, each overriding the same field of the chosen context.
const (
	EnvConfig      = "MILLWRIGHT_CONFIG"
	EnvContext     = "MILLWRIGHT_CONTEXT"
	EnvPolicyAddr  = "MILLWRIGHT_POLICY_ADDR"
	EnvRolesetAddr = "MILLWRIGHT_ROLESET_ADDR"
	EnvBillingAddr = "MILLWRIGHT_BILLING_ADDR"
	EnvToken       = "MILLWRIGHT_TOKEN"
	EnvTokenFile   = "MILLWRIGHT_TOKEN_FILE"
	EnvWorkspace   = "MILLWRIGHT_WORKSPACE"
)

// Context is one named set of services and credentials. Token and TokenFile are
// alternatives: a token file keeps the secret where it already is (e.g. make run's .run/).
type Context struct {
	Name        string `json:"name"`
	PolicyAddr  string `json:"policy_addr,omitempty"`
	RolesetAddr string `json:"roleset_addr,omitempty"`
	BillingAddr string `json:"billing_addr,omitempty"`
	Token       string `json:"token,omitempty"`
	TokenFile   string `json:"token_file,omitempty"`
	Workspace   string `json:"workspace,omitempty"`
}

// File is the config file: the contexts and the one in use.
type File struct {
	Current  string    `json:"current,omitempty"`
	Contexts []Context `json:"contexts,omitempty"`
}

// Find returns the context called name.
func (f *File) Find(name string) (Context, bool) {
	i := slices.IndexFunc(f.Contexts, func(c Context) bool { return c.Name == name })
	if i < 0 {
		return Context{}, false
	}
	return f.Contexts[i], true
}

// Put adds c, or replaces the context of the same name.
func (f *File) Put(c Context) {
	if i := slices.IndexFunc(f.Contexts, func(o Context) bool { return o.Name == c.Name }); i >= 0 {
		f.Contexts[i] = c
		return
	}
	f.Contexts = append(f.Contexts, c)
}

// Remove drops the context called name (and unsets it as current); false if there is none.
func (f *File) Remove(name string) bool {
	n := len(f.Contexts)
	f.Contexts = slices.DeleteFunc(f.Contexts, func(c Context) bool { return c.Name == name })
	if f.Current == name {
		f.Current = ""
	}
	return len(f.Contexts) < n
}

// Path is the config file's path: $MILLWRIGHT_CONFIG, else
// $XDG_CONFIG_HOME/millwright/config.json (~/.config when XDG_CONFIG_HOME is unset).
func Path(getenv func(string) string) (string, error) {
	if p := getenv(EnvConfig); p != "" {
		return p, nil
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return "", fmt.Errorf("no config file: set %s, XDG_CONFIG_HOME or HOME", EnvConfig)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "millwright", "config.json"), nil
}

// Load reads the config file at path; a missing file is an empty config. A file that holds a
// token must not be readable by group or others.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if slices.ContainsFunc(f.Contexts, func(c Context) bool { return c.Token != "" }) {
		if err := private(path); err != nil {
			return nil, err
		}
	}
	return &f, nil
}

// Save writes f to path with mode 0600 (its directory 0700), replacing the file in one
// rename so that a crash never leaves half a config.
func Save(path string, f *File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file 0600 already; say it, since that is the point.
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReadTokenFile reads a token from path, refusing a file group or others can read.
func ReadTokenFile(path string) (string, error) {
	if err := private(path); err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// private refuses a file that holds a secret and that group or others may read.
func private(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if mode := st.Mode().Perm(); mode&0o077 != 0 {
		return fmt.Errorf("%s holds a token and is readable by others (mode %04o): run chmod 600 %s", path, mode, path)
	}
	return nil
}
