package builderfixture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const realFixtures = "../../services/policy/internal/builder/testdata"

// TestDecodeRefuses: a fixture that says more, or other, than the schema fails the load, so a
// misspelt expectation cannot silently weaken a fixture in any runner.
func TestDecodeRefuses(t *testing.T) {
	valid := `{"name":"x","description":"d","value":{},"expect":{"allowed":true,"violations":[],"runnables":[],"tags":[],"pins":[]}}`
	var fx FlowFixture
	require.NoError(t, Decode(strings.NewReader(valid+"\n"), &fx))
	require.True(t, fx.Expect.Allowed)

	for name, doc := range map[string]string{
		"unknown top-level field":   `{"name":"x","description":"d","value":{},"expected":{}}`,
		"unknown expectation":       `{"name":"x","description":"d","value":{},"expect":{"allowed":true,"violatons":[]}}`,
		"unknown field in a list":   `{"name":"x","description":"d","value":{},"expect":{"pins":[{"path":"p","hash":"h","pointer":"","sha":"1"}]}}`,
		"a second document after":   valid + valid,
		"trailing garbage":          valid + ` ]`,
		"wrong type":                `{"name":"x","description":"d","value":{},"expect":{"allowed":"yes"}}`,
		"not an object":             `[]`,
		"truncated":                 valid[:len(valid)-1],
		"unknown field in a setup":  `{"name":"s","description":"d","setup":{"scripts":[{"path":"p","hashes":["h"],"writers":["u/x"]}]},"cases":[]}`,
		"unknown field in a case":   `{"name":"s","description":"d","setup":{},"cases":[{"name":"c","rpc":"flow","expect":{"code":"OK","refs":[]}}]}`,
		"unknown field in requests": `{"name":"preview","description":"d","cases":[{"name":"c","path":"p","expect":{"allowed":true,"violations":[{"reason":"R","why":"w"}]}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			var into any = &FlowFixture{}
			switch {
			case strings.Contains(doc, `"setup"`):
				into = &ServiceFixture{}
			case strings.Contains(doc, `"cases"`):
				into = &RequestFixture{}
			}
			assert.Error(t, Decode(strings.NewReader(doc), into))
		})
	}
}

// TestReadFileNamesTheFile: the refusal says which file it is.
func TestReadFileNamesTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"nme":"x"}`), 0o600))
	err := ReadFile(file, &AppFixture{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), file)
	assert.Contains(t, err.Error(), `unknown field "nme"`)
}

// TestLoadRealFixtures: every file under the builder testdata loads with this schema and turns
// into service cases, and the walk cases say what the files say.
func TestLoadRealFixtures(t *testing.T) {
	flows, apps, reqs := Flows(t, realFixtures), Apps(t, realFixtures), Requests(t, realFixtures)
	require.NotEmpty(t, flows)
	require.NotEmpty(t, apps)
	require.Equal(t, "preview", reqs[0].Name)
	require.Equal(t, "deploy", reqs[1].Name)
	sf, cases := Load(t, realFixtures)
	require.NotEmpty(t, sf.Setup.Workspaces)
	for _, s := range sf.Setup.Scripts {
		require.NotEmpty(t, s.Hashes, "script %s: Hashes[0] is its latest version", s.Path)
	}
	byName := map[string]Case{}
	for _, c := range cases {
		require.NotContains(t, byName, c.Name, "two cases named %q", c.Name)
		byName[c.Name] = c
	}
	for _, fx := range flows {
		c := byName["flows/"+fx.Name]
		switch {
		case fx.Expect.InputError != nil:
			assert.Equal(t, "INVALID_ARGUMENT", c.Expect.Code, fx.Name)
		case fx.Expect.Allowed:
			assert.Equal(t, "OK", c.Expect.Code, fx.Name)
			assert.Len(t, c.Expect.Refs, len(fx.Expect.Runnables)+len(fx.Expect.Tags)+len(fx.Expect.Pins), fx.Name)
		default:
			assert.Equal(t, "PERMISSION_DENIED", c.Expect.Code, fx.Name)
			assert.Len(t, c.Expect.Violations, len(fx.Expect.Violations), fx.Name)
		}
	}
}
