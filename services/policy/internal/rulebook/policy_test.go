package rulebook_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

func TestParsePath(t *testing.T) {
	cases := []struct {
		in string
		ok bool
	}{
		{"u/alice/s", true}, {"f/fin/a/b.c", true}, {"u/alice", false}, {"hub/1/x", false}, {"g/x/y", false},
		{"f/fin/../x", false}, {"f/fin/./x", false}, {"u/Alice/s", false}, {"f/a,b/x", false}, {"u/alice/", false},
		{"", false}, {"u//x", false}, {"f/fin/x y", false},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) { _, ok := rulebook.ParsePath(tc.in); require.Equal(t, tc.ok, ok) })
	}
}

func TestValidHash(t *testing.T) {
	for in, ok := range map[string]bool{"00000000000000a1": true, "00000000000000A1": false, "0000000000000a1": false,
		"00000000000000a10": false, "000000000000000g": false, "": false} {
		require.Equal(t, ok, rulebook.ValidHash(in), in)
	}
}

func TestResolveAndMerge(t *testing.T) {
	d := rulebook.DefaultOperatorSettings()
	require.False(t, d.Builder)
	require.True(t, d.ManageSchedules && d.ManageTriggers && d.Runs)
	for stored, builder := range map[string]bool{`{"builder":true}`: true, `{"builder":"true"}`: false, `{"builder":1}`: false, `{}`: false} {
		s, err := rulebook.ResolveOperatorSettings([]byte(stored))
		require.NoError(t, err)
		require.Equal(t, builder, s.Builder, stored)
	}
	out, err := rulebook.Merge([]byte(`{"manage_triggers":false,"custom":1}`), rulebook.SettingsPatch{"builder": true})
	require.NoError(t, err)
	require.JSONEq(t, `{"manage_triggers":false,"custom":1,"builder":true}`, string(out))
	_, err = rulebook.Merge(nil, rulebook.SettingsPatch{"nope": true})
	require.Error(t, err)
}

func TestCheckTags(t *testing.T) {
	rules := []rulebook.TagRule{{Name: "default"}, {Name: "gpu", Privileged: true}}
	require.NoError(t, rulebook.CheckTags(rules, rulebook.RoleOperator, []string{"default"}))
	require.Error(t, rulebook.CheckTags(rules, rulebook.RoleOperator, []string{"gpu"}))
	require.Error(t, rulebook.CheckTags(rules, rulebook.Role(""), []string{"gpu"}))
	require.NoError(t, rulebook.CheckTags(rules, rulebook.RoleDeveloper, []string{"gpu"}))
	require.Error(t, rulebook.CheckTags(rules, rulebook.RoleAdmin, []string{"unknown"}))
}

func TestResultCacheKey(t *testing.T) {
	alice, bob := "alice@x", "bob@x"
	k := func(args string, viewer *string) string {
		key, err := rulebook.ResultCacheKey("w", "script", rulebook.Runnable{Path: "u/a/s"}, []byte(args), viewer)
		require.NoError(t, err)
		return key
	}
	require.Equal(t, k(`{"a":1,"b":2}`, &alice), k(`{"b":2,"a":1}`, &alice))
	require.NotEqual(t, k(`{"a":1}`, &alice), k(`{"a":1}`, &bob))
	require.NotEqual(t, k(`{"a":1}`, &alice), k(`{"a":1}`, nil))
	require.Equal(t, k(`{"a":1}`, nil), k(` {"a": 1} `, nil), "canonical: white space does not matter")
	require.Equal(t, k(``, nil), k(`{}`, nil))
	// A viewer named like the no-viewer marker is still a viewer.
	marker := "no-viewer"
	require.NotEqual(t, k(`{}`, nil), k(`{}`, &marker))
	other, err := rulebook.ResultCacheKey("w2", "script", rulebook.Runnable{Path: "u/a/s"}, []byte(`{"a":1}`), nil)
	require.NoError(t, err)
	require.NotEqual(t, k(`{"a":1}`, nil), other, "another workspace's run never shares a key")
	_, err = rulebook.ResultCacheKey("w", "script", rulebook.Runnable{Path: "u/a/s", Hash: "00000000000000a1"}, nil, nil)
	require.Error(t, err)
	for _, bad := range []string{`[]`, `{"a":1,"a":1}`, `{"a":1} x`, `{`, `"s"`} {
		_, err := rulebook.CanonicalArgs([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestScopesWithin(t *testing.T) {
	require.True(t, rulebook.ScopesWithin(nil, []string{"*"}))
	require.False(t, rulebook.ScopesWithin(nil, []string{"jobs:run"}))
	require.True(t, rulebook.ScopesWithin([]string{"jobs:run"}, []string{"jobs:run", "apps:write"}))
	require.False(t, rulebook.ScopesWithin([]string{"apps:write"}, []string{"jobs:run"}))
}

func FuzzCanonicalArgs(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"b":[1,{"c":null}],"a":"x"}`, `{}`, ``, `{"a":1,"a":2}`, `[1]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		args, err := rulebook.CanonicalArgs([]byte(in))
		if err != nil {
			return
		}
		// Canonical form is a fixed point: re-parsing a canonical value gives the same bytes.
		for _, a := range args {
			again, err := rulebook.CanonicalArgs([]byte(`{"k":` + string(a.Value) + `}`))
			require.NoError(t, err)
			require.Len(t, again, 1)
			require.Equal(t, a.Value, again[0].Value)
		}
	})
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"u/alice/s", "f/fin/a/b", "hub/1/x", "f/a/../b", "u/a,b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, ok := rulebook.ParsePath(in)
		if !ok {
			return
		}
		// Accepted paths never carry the separators the RLS settings rely on.
		require.NotContains(t, p.Owner, ",")
		require.NotContains(t, p.Owner, "/")
		require.LessOrEqual(t, len(in), rulebook.MaxPathLen)
		require.Contains(t, []string{"u", "f"}, p.Space)
	})
}
