package builderfixture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The typed schema of the files under services/policy/internal/builder/testdata (format in its
// README.md). It is the only reading of those files: the builder package's Go runner, the
// policy service's gRPC runner, the gateway's REST runner and the fuzz seeds all load them
// through it, so a field means the same to every runner and a typo in one fails everywhere.

// Violation is a finding as the fixtures write it: its reason (without ERROR_REASON_), the
// document it is in (flow, app_value, app_policy, request; empty where the file leaves it out)
// and an RFC 6901 pointer into that document.
type Violation struct {
	Reason  string `json:"reason"`
	Doc     string `json:"doc,omitempty"`
	Pointer string `json:"pointer"`
}

// Runnable is a referenced script or flow and the step (or key) that references it.
type Runnable struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Pointer string `json:"pointer"`
}

// Tag is a worker tag a flow step asks for.
type Tag struct {
	Tag     string `json:"tag"`
	Pointer string `json:"pointer"`
}

// Pin is a step pinned to one version hash of a script.
type Pin struct {
	Path    string `json:"path"`
	Hash    string `json:"hash"`
	Pointer string `json:"pointer"`
}

// InputError is where a document is refused as malformed (InvalidArgument).
type InputError struct {
	Doc     string `json:"doc,omitempty"`
	Pointer string `json:"pointer"`
}

// FlowFixture is one flows/*.json file: a flow value and what WalkFlow must say of it.
type FlowFixture struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Value       json.RawMessage `json:"value"`
	Expect      FlowExpect      `json:"expect"`
}

// FlowExpect is a flow fixture's expected report.
type FlowExpect struct {
	Allowed    bool        `json:"allowed"`
	InputError *InputError `json:"input_error"`
	Violations []Violation `json:"violations"`
	Runnables  []Runnable  `json:"runnables"`
	Tags       []Tag       `json:"tags"`
	Pins       []Pin       `json:"pins"`
}

// AppFixture is one apps/*.json file: an app value and policy and what WalkApp must say.
type AppFixture struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Value       json.RawMessage `json:"value"`
	Policy      json.RawMessage `json:"policy"`
	Options     AppOptions      `json:"options"`
	Expect      AppExpect       `json:"expect"`
}

// AppOptions are the workspace settings an app fixture is walked with.
type AppOptions struct {
	StripSDKReadScopes bool `json:"strip_sdk_read_scopes"`
}

// AppExpect is an app fixture's expected report.
type AppExpect struct {
	Allowed          bool            `json:"allowed"`
	InputError       *InputError     `json:"input_error"`
	Violations       []Violation     `json:"violations"`
	PolicyPaths      []Runnable      `json:"policy_paths"`
	ValuePaths       []Runnable      `json:"value_paths"`
	ExecutionMode    string          `json:"execution_mode"`
	Kind             string          `json:"kind"`
	NormalizedPolicy json.RawMessage `json:"normalized_policy"`
}

// RequestFixture is requests/preview.json or requests/deploy.json: request-only checks.
type RequestFixture struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Cases       []RequestCase `json:"cases"`
}

// RequestCase is one preview or deploy request and its expected verdict (reasons only: request
// findings have no document pointer).
type RequestCase struct {
	Name       string   `json:"name"`
	Path       string   `json:"path"`
	RawCode    bool     `json:"raw_code"`
	IsOperator bool     `json:"is_operator"`
	DeployPath string   `json:"deploy_path"`
	Scopes     []string `json:"scopes"`
	Expect     struct {
		Allowed    bool        `json:"allowed"`
		Violations []Violation `json:"violations"`
	} `json:"expect"`
}

// Decode reads exactly one JSON value from r into into, refusing unknown fields and anything
// after the value: a misspelt expectation would otherwise be dropped and the fixture silently
// weakened.
func Decode(r io.Reader, into any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the top-level value")
	}
	return nil
}

// ReadFile decodes one fixture file with Decode.
func ReadFile(file string, into any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := Decode(bytes.NewReader(b), into); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// ReadJSON is ReadFile that fails the test on error.
func ReadJSON(t testing.TB, file string, into any) {
	t.Helper()
	require.NoError(t, ReadFile(file, into))
}

// files lists dir/sub/*.json, sorted; there must be at least one.
func files(t testing.TB, dir, sub string) []string {
	t.Helper()
	fs, err := filepath.Glob(filepath.Join(dir, sub, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, fs, "no fixtures in %s", filepath.Join(dir, sub))
	sort.Strings(fs)
	return fs
}

// named checks what every walk fixture promises: its name is its file's, and it says why.
func named(t testing.TB, file, name, description string) {
	t.Helper()
	require.Equal(t, strings.TrimSuffix(filepath.Base(file), ".json"), name, "%s: file name and fixture name differ", file)
	require.NotEmpty(t, description, "%s: no description", file)
}

// Flows loads every flows/*.json under dir (the builder testdata directory), in file order.
func Flows(t testing.TB, dir string) []FlowFixture {
	t.Helper()
	return loadAll(t, dir, "flows", func(fx *FlowFixture) (string, string) { return fx.Name, fx.Description })
}

// Apps loads every apps/*.json under dir, in file order.
func Apps(t testing.TB, dir string) []AppFixture {
	t.Helper()
	return loadAll(t, dir, "apps", func(fx *AppFixture) (string, string) { return fx.Name, fx.Description })
}

// loadAll reads every dir/sub/*.json as a T and checks its name and description.
func loadAll[T any](t testing.TB, dir, sub string, id func(*T) (name, description string)) []T {
	t.Helper()
	var out []T
	for _, f := range files(t, dir, sub) {
		var fx T
		ReadJSON(t, f, &fx)
		name, description := id(&fx)
		named(t, f, name, description)
		out = append(out, fx)
	}
	return out
}

// Requests loads requests/preview.json and requests/deploy.json under dir, in that order; no
// other request fixture exists (a runner would not know which check to run it against).
func Requests(t testing.TB, dir string) []RequestFixture {
	t.Helper()
	require.Len(t, files(t, dir, "requests"), 2, "requests/ holds preview.json and deploy.json only")
	var out []RequestFixture
	for _, n := range []string{"preview", "deploy"} {
		var rf RequestFixture
		f := filepath.Join(dir, "requests", n+".json")
		ReadJSON(t, f, &rf)
		named(t, f, rf.Name, rf.Description)
		out = append(out, rf)
	}
	return out
}
