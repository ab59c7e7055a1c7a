package names_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/names"
)

func TestEmail(t *testing.T) {
	good := []string{
		"a@x", "alice@example.com", "first.last+tag@sub.example.co", "o'brien@x.io", "a_b-c@x-y.z",
		strings.Repeat("a", 243) + "@example.com", // 255 bytes
	}
	for _, s := range good {
		require.True(t, names.Email(s), "%q", s)
	}
	bad := map[string]string{
		"":                     "empty",
		"alice":                "no @",
		"@x":                   "no local part",
		"a@":                   "no domain",
		"a@b@c":                "two @",
		"Alice@example.com":    "upper case is refused, not folded",
		"alice@Example.com":    "upper-case domain",
		" alice@x":             "leading space",
		"alice@x ":             "trailing space",
		"ali ce@x":             "inner space",
		"alice\u00a0@x":        "NO-BREAK SPACE",
		"\u00a0alice@x":        "leading NO-BREAK SPACE (billing used to trim it)",
		"alice@x\u2003":        "EM SPACE (billing used to trim it)",
		"\u212aelvin@x":        "KELVIN SIGN (lower-cases to k)",
		"kelvin@\u212a.com":    "KELVIN SIGN in the domain",
		"\uff41lice@x":         "FULLWIDTH a",
		"\u0430lice@x":         "CYRILLIC a",
		"alice@b\u00fccher.de": "IDN in Unicode form",
		"a\u200b@x":            "ZERO WIDTH SPACE",
		"a,b@x":                "comma (RLS lists)",
		"a@x,y":                "comma in the domain",
		"\"a b\"@x":            "quoted local part",
		"a@x\n":                "newline",
		"a\x00@x":              "NUL",
		"a@-x.com":             "domain label starting with -",
		"a@x..com":             "empty label",
		"a@x.com.":             "trailing dot",
		strings.Repeat("a", 244) + "@example.com": "256 bytes",
		"a@\xff": "invalid UTF-8",
	}
	for s, why := range bad {
		require.False(t, names.Email(s), "%q: %s", s, why)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		fn   func(string) bool
		good []string
		bad  []string
	}{
		{names.Workspace, []string{"demo", "w", "a-b_c1"}, []string{"", "Demo", "a b", "a b!", "-a", "_a", "a.b", strings.Repeat("a", 51), "dém"}},
		{names.Username, []string{"alice", "a.b-c_d"}, []string{"", "Alice", ".a", "a/b", "a b", strings.Repeat("a", 51)}},
		{names.Group, []string{"emea", "g-1_x"}, []string{"", "a.b", "a,b", "A", "a/b"}},
		{names.Path, []string{"u/alice/x", "f/sales/a/b.c"}, []string{"", "u/Alice/x", "f/a.b/x", "h/x/y", "u/alice", "u/alice/", "u/alice/.x", "f/sales/" + strings.Repeat("a", 250)}},
		{names.ClusterID, []string{"main", "c_1-2"}, []string{"", "Main", "a b", strings.Repeat("a", 64)}},
		{names.Host, []string{"localhost", "10.0.0.1", "::1", "db.Example.com"}, []string{"", "a b", "a/b", "h\u00e9", strings.Repeat("a", 254)}},
		{names.Identifier, []string{"postgres", "My_DB$1"}, []string{"", "a b", "a;b", "a\"b", strings.Repeat("a", 64)}},
	} {
		for _, s := range tc.good {
			require.True(t, tc.fn(s), "%q", s)
		}
		for _, s := range tc.bad {
			require.False(t, tc.fn(s), "%q", s)
		}
	}
}
