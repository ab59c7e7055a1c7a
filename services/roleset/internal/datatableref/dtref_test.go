package datatableref

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

func TestParseValid(t *testing.T) {
	cases := []struct {
		in   string
		want Ref
		// canon is the canonical String(), when it differs from in.
		canon string
	}{
		{"datatable://main", Ref{Name: "main"}, ""},
		{"datatable://main?as=viewer", Ref{Name: "main", AsViewer: true}, ""},
		{"datatable://main?role=analytics", Ref{Name: "main", Role: "analytics"}, ""},
		{"datatable://main?role=admin", Ref{Name: "main", Role: "admin"}, ""},
		{"datatable://Sales-DB_2?role=Sales_Mixed", Ref{Name: "Sales-DB_2", Role: "Sales_Mixed"}, ""},
		{"datatable://main?ROLE=analytics", Ref{Name: "main", Role: "analytics"}, "datatable://main?role=analytics"},
		{"datatable://main?Role=r-1", Ref{Name: "main", Role: "r-1"}, "datatable://main?role=r-1"},
		{"datatable://main?AS=viewer", Ref{Name: "main", AsViewer: true}, "datatable://main?as=viewer"},
		{"datatable://" + strings.Repeat("n", 63) + "?role=" + strings.Repeat("r", 63),
			Ref{Name: strings.Repeat("n", 63), Role: strings.Repeat("r", 63)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			canon := tc.canon
			if canon == "" {
				canon = tc.in
			}
			assert.Equal(t, canon, got.String())
			again, err := Parse(got.String())
			require.NoError(t, err)
			assert.Equal(t, got, again)
		})
	}
}

func TestParseRefused(t *testing.T) {
	cases := []struct {
		name string
		in   string
		rule string
		pos  int
	}{
		// Scheme and shape.
		{"empty", "", RuleBadScheme, 0},
		{"bare datatable", "datatable", RuleBadScheme, 0},
		{"bare datatable with query", "datatable?as=viewer", RuleBadScheme, 0},
		{"uppercase scheme", "DATATABLE://main", RuleBadScheme, 0},
		{"single slash", "datatable:/main", RuleBadScheme, 0},
		{"other scheme", "postgres://main", RuleBadScheme, 0},
		{"name only", "main", RuleBadScheme, 0},
		{"empty name", "datatable://", RuleEmptyName, 12},
		{"empty name with query", "datatable://?as=viewer", RuleEmptyName, 12},
		{"too long", "datatable://" + strings.Repeat("a", 300), RuleTooLong, MaxLen},

		// Characters refused anywhere.
		{"space in name", "datatable://ma in", RuleWhitespace, 14},
		{"leading space", " datatable://main", RuleWhitespace, 0},
		{"trailing newline", "datatable://main\n", RuleWhitespace, 16},
		{"tab in value", "datatable://main?role=a\tb", RuleWhitespace, 23},
		{"nbsp", "datatable://main\u00a0", RuleWhitespace, 16},
		{"nul", "datatable://main\x00?role=admin", RuleControlChar, 16},
		{"escape", "datatable://main\x1b", RuleControlChar, 16},
		{"del", "datatable://main\x7f", RuleControlChar, 16},
		{"c1 control", "datatable://main\u0085x", RuleWhitespace, 16},
		{"c1 control not space", "datatable://main\u0090", RuleControlChar, 16},
		{"non ascii", "datatable://mäin", RuleNonASCII, 13},
		{"invalid utf8", "datatable://ma\xffin", RuleNonASCII, 14},
		{"percent in value", "datatable://main?role=%61dmin", RulePercentEncoding, 22},
		{"percent in key", "datatable://main?%72ole=x", RulePercentEncoding, 17},
		{"percent in name", "datatable://ma%69n", RulePercentEncoding, 14},
		{"encoded question mark", "datatable://main%3Frole=admin", RulePercentEncoding, 16},
		{"fragment", "datatable://main#x", RuleFragment, 16},
		{"fragment after query", "datatable://main?as=viewer#", RuleFragment, 26},

		// Name.
		{"userinfo", "datatable://alice@main", RuleBadName, 17},
		{"userinfo password", "datatable://alice:pw@main", RuleBadName, 17},
		{"host and port", "datatable://main:5432", RuleBadName, 16},
		{"path", "datatable://main/other", RuleBadName, 16},
		{"triple slash", "datatable:///main", RuleBadName, 12},
		{"dot", "datatable://main.db", RuleBadName, 16},
		{"ipv6", "datatable://[::1]", RuleBadName, 12},
		{"backslash", `datatable://main\x`, RuleBadName, 16},
		{"semicolon", "datatable://main;role=admin", RuleBadName, 16},
		{"name too long", "datatable://" + strings.Repeat("a", 64), RuleBadName, 12 + 63},

		// Query structure.
		{"empty query", "datatable://main?", RuleMalformedQuery, 17},
		{"double question mark", "datatable://main??as=viewer", RuleMalformedQuery, 17},
		{"trailing ampersand", "datatable://main?as=viewer&", RuleMalformedQuery, 27},
		{"leading ampersand", "datatable://main?&as=viewer", RuleMalformedQuery, 17},
		{"double ampersand", "datatable://main?role=a&&x=y", RuleMalformedQuery, 24},
		{"key without equals", "datatable://main?role", RuleMalformedQuery, 17},
		{"viewer flag", "datatable://main?viewer", RuleMalformedQuery, 17},
		{"empty key", "datatable://main?=viewer", RuleMalformedQuery, 17},

		// Keys.
		{"unknown key", "datatable://main?schema=x", RuleUnknownKey, 17},
		{"unknown key after role", "datatable://main?role=a&user=b", RuleUnknownKey, 24},
		{"as_viewer key", "datatable://main?as_viewer=true", RuleUnknownKey, 17},
		{"duplicate role", "datatable://main?role=a&role=a", RuleDuplicateKey, 24},
		{"duplicate role any case", "datatable://main?role=a&ROLE=b", RuleDuplicateKey, 24},
		{"duplicate as", "datatable://main?as=viewer&as=viewer", RuleDuplicateKey, 27},
		{"duplicate as any case", "datatable://main?As=viewer&aS=viewer", RuleDuplicateKey, 27},

		// Values.
		{"empty role", "datatable://main?role=", RuleEmptyValue, 22},
		{"empty as", "datatable://main?as=", RuleEmptyValue, 20},
		{"empty role before as", "datatable://main?role=&as=viewer", RuleEmptyValue, 22},
		{"role with as", "datatable://main?role=a&as=viewer", RuleRoleWithAs, 24},
		{"as with role", "datatable://main?as=viewer&role=a", RuleRoleWithAs, 27},
		{"as admin", "datatable://main?as=admin", RuleAsNotViewer, 20},
		{"as owner", "datatable://main?as=owner", RuleAsNotViewer, 20},
		{"as VIEWER", "datatable://main?as=VIEWER", RuleAsNotViewer, 20},
		{"as viewer with junk", "datatable://main?as=viewer=1", RuleAsNotViewer, 20},
		{"as viewer question", "datatable://main?as=viewer?role=admin", RuleMalformedQuery, 26},

		// Roles.
		{"role ADMIN", "datatable://main?role=ADMIN", RuleBadRole, 22},
		{"role postgres", "datatable://main?role=postgres", RuleBadRole, 22},
		{"role pg_", "datatable://main?role=pg_read_all_data", RuleBadRole, 22},
		{"role wm_set", "datatable://main?role=wm_set_0123", RuleBadRole, 22},
		{"role custom_instance_user", "datatable://main?role=custom_instance_user", RuleBadRole, 22},
		{"role sentinel", "datatable://main?role=$viewer", RuleBadRole, 22},
		{"role none sentinel", "datatable://main?role=$none", RuleBadRole, 22},
		{"role quote", `datatable://main?role=a"b`, RuleBadRole, 23},
		{"role plus", "datatable://main?role=a+b", RuleBadRole, 23},
		{"role with equals", "datatable://main?role=a=b", RuleBadRole, 23},
		{"role question", "datatable://main?role=a?b", RuleMalformedQuery, 23},
		{"role too long", "datatable://main?role=" + strings.Repeat("r", 64), RuleBadRole, 22},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			require.Error(t, err, "parsed as %+v", got)
			assert.Equal(t, Ref{}, got)
			var pe *Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.rule, pe.Rule)
			assert.Equal(t, tc.pos, pe.Pos)
			assert.Equal(t, FieldReference, pe.Field)
			assert.True(t, printableASCII(pe.Input), "unsafe Input %q", pe.Input)
			assert.True(t, printableASCII(pe.Error()), "unsafe message %q", pe.Error())
		})
	}
}

func TestErrorInputRedactsUserinfo(t *testing.T) {
	_, err := Parse("datatable://alice:s3cr3t@main?role=x")
	var pe *Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "datatable://***@main?role=x", pe.Input)
	assert.NotContains(t, pe.Error(), "s3cr3t")

	_, err = Parse("postgres://u:hunter2@db:5432/x")
	require.ErrorAs(t, err, &pe)
	assert.NotContains(t, pe.Error(), "hunter2")
}

func TestErrorInputTruncated(t *testing.T) {
	_, err := Parse("datatable://main?role=" + strings.Repeat("x", 200))
	var pe *Error
	require.ErrorAs(t, err, &pe)
	assert.LessOrEqual(t, len(pe.Input), 83)
	assert.True(t, strings.HasSuffix(pe.Input, "..."))
}

func TestFromAgent(t *testing.T) {
	cases := []struct {
		name      string
		datatable string
		role      string
		want      Ref
		rule      string
		field     string
	}{
		{"default role", "main", "", Ref{Name: "main"}, "", ""},
		{"viewer", "main", ViewerSentinel, Ref{Name: "main", AsViewer: true}, "", ""},
		{"named role", "main", "analytics", Ref{Name: "main", Role: "analytics"}, "", ""},
		{"admin", "main", "admin", Ref{Name: "main", Role: "admin"}, "", ""},

		{"empty datatable", "", "", Ref{}, RuleEmptyName, FieldDatatable},
		{"bad datatable", "main?role=admin", "", Ref{}, RuleBadName, FieldDatatable},
		{"datatable as reference", "datatable://main", "", Ref{}, RuleBadName, FieldDatatable},
		{"datatable whitespace", "main ", "", Ref{}, RuleWhitespace, FieldDatatable},
		{"datatable percent", "ma%69n", "", Ref{}, RulePercentEncoding, FieldDatatable},
		{"role whitespace", "main", " analytics", Ref{}, RuleWhitespace, FieldRole},
		{"role control", "main", "a\x00", Ref{}, RuleControlChar, FieldRole},
		{"sentinel other case", "main", "$VIEWER", Ref{}, RuleBadRole, FieldRole},
		{"sentinel without dollar", "main", "viewer", Ref{Name: "main", Role: "viewer"}, "", ""},
		{"as=viewer as role", "main", "as=viewer", Ref{}, RuleBadRole, FieldRole},
		{"reserved role", "main", "wm_set_1", Ref{}, RuleBadRole, FieldRole},
		{"ADMIN", "main", "ADMIN", Ref{}, RuleBadRole, FieldRole},
		{"role too long", "main", strings.Repeat("r", 300), Ref{}, RuleTooLong, FieldRole},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromAgent(tc.datatable, tc.role)
			if tc.rule == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				dt, role := got.AgentFields()
				again, err := FromAgent(dt, role)
				require.NoError(t, err)
				assert.Equal(t, got, again)
				viaRef, err := Parse(got.String())
				require.NoError(t, err)
				assert.Equal(t, got, viaRef)
				return
			}
			var pe *Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.rule, pe.Rule)
			assert.Equal(t, tc.field, pe.Field)
			assert.Equal(t, Ref{}, got)
		})
	}
}

func TestViewerSentinelIsNoRoleName(t *testing.T) {
	require.Error(t, rolename.Validate(ViewerSentinel))
	require.Error(t, rolename.ValidateSelectable(ViewerSentinel))
	_, err := Parse("datatable://main?role=" + ViewerSentinel)
	assert.Error(t, err)
}

func TestValidName(t *testing.T) {
	assert.True(t, ValidName("main"))
	assert.True(t, ValidName(strings.Repeat("a", 63)))
	assert.False(t, ValidName(""))
	assert.False(t, ValidName(strings.Repeat("a", 64)))
	assert.False(t, ValidName("ma?in"))
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"datatable://main",
		"datatable://main?as=viewer",
		"datatable://main?role=analytics",
		"datatable://main?role=admin",
		"datatable://main?ROLE=a&role=b",
		"datatable://main?role=a&as=viewer",
		"datatable://main?as=Viewer",
		"datatable://main?role=%61dmin",
		"datatable://u:p@main",
		"datatable://main#frag",
		"datatable://",
		"datatable",
		"datatable://main?",
		"datatable://main?role=wm_set_x",
		"datatable://main?role=$viewer",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := Parse(s)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error is %T, want *Error", err)
			}
			if pe.Rule == "" || !printableASCII(pe.Input) || pe.Pos < 0 || pe.Pos > len(s) {
				t.Fatalf("bad error %+v for %q", pe, s)
			}
			if ref != (Ref{}) {
				t.Fatalf("non-zero Ref %+v with an error", ref)
			}
			return
		}
		checkRef(t, ref)
		again, err := Parse(ref.String())
		if err != nil {
			t.Fatalf("Parse(%q) ok, Parse(String()=%q) failed: %v", s, ref.String(), err)
		}
		if again != ref {
			t.Fatalf("round trip changed %+v to %+v", ref, again)
		}
		dt, role := ref.AgentFields()
		agent, err := FromAgent(dt, role)
		if err != nil || agent != ref {
			t.Fatalf("agent round trip of %+v: %+v, %v", ref, agent, err)
		}
	})
}

func FuzzFromAgent(f *testing.F) {
	f.Add("main", "")
	f.Add("main", ViewerSentinel)
	f.Add("main", "admin")
	f.Add("main", "a b")
	f.Fuzz(func(t *testing.T, datatable, role string) {
		ref, err := FromAgent(datatable, role)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Rule == "" {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		checkRef(t, ref)
		if got, err := Parse(ref.String()); err != nil || got != ref {
			t.Fatalf("reference round trip of %+v: %+v, %v", ref, got, err)
		}
	})
}

func checkRef(t *testing.T, ref Ref) {
	t.Helper()
	if ref.AsViewer && ref.Role != "" {
		t.Fatalf("both AsViewer and Role set: %+v", ref)
	}
	if !ValidName(ref.Name) {
		t.Fatalf("invalid name accepted: %+v", ref)
	}
	if ref.Role != "" {
		if err := rolename.ValidateSelectable(ref.Role); err != nil {
			t.Fatalf("role %q accepted but fails validation: %v", ref.Role, err)
		}
		if ref.Role != rolename.AdminRole {
			if err := rolename.Validate(ref.Role); err != nil {
				t.Fatalf("role %q accepted but fails Validate: %v", ref.Role, err)
			}
		}
	}
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
