package rolename

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		in   string
		rule string // "" = valid
		pos  int
	}{
		{"simple", "sales_emea", "", 0},
		{"mixed case", "Sales_Mixed", "", 0},
		{"dash and digits", "r-001", "", 0},
		{"leading digit", "1role", "", 0},
		{"leading dash", "-x", "", 0},
		{"max length", strings.Repeat("a", 63), "", 0},
		{"contains admin", "sales_admin", "", 0},
		{"pg without underscore", "pgadmin", "", 0},
		{"wm_set without trailing underscore", "wm_setx", "", 0},

		{"empty", "", RuleLength, 0},
		{"too long", strings.Repeat("a", 64), RuleLength, 0},
		{"too long multibyte", strings.Repeat("é", 32), RuleLength, 0},

		{"space", "sales emea", RuleCharset, 5},
		{"double quote", `a"b`, RuleCharset, 1},
		{"single quote", "a'b", RuleCharset, 1},
		{"semicolon", "a;drop", RuleCharset, 1},
		{"dot", "a.b", RuleCharset, 1},
		{"dollar", "a$b", RuleCharset, 1},
		{"slash", "u/alice", RuleCharset, 1},
		{"nul", "a\x00b", RuleCharset, 1},
		{"newline", "a\n", RuleCharset, 1},
		{"non ascii", "rôle", RuleCharset, 1},
		{"question mark", "main?x", RuleCharset, 4},
		{"backslash", `a\b`, RuleCharset, 1},

		{"viewer sentinel", ViewerSentinel, RuleReservedName, 0},
		{"none sentinel", NoneSentinel, RuleReservedName, 0},
		{"admin", "admin", RuleReservedName, 0},
		{"ADMIN", "ADMIN", RuleReservedName, 0},
		{"Admin", "Admin", RuleReservedName, 0},
		{"postgres", "postgres", RuleReservedName, 0},
		{"Postgres", "Postgres", RuleReservedName, 0},
		{"public", "public", RuleReservedName, 0},
		{"PUBLIC", "PUBLIC", RuleReservedName, 0},
		{"none", "none", RuleReservedName, 0},
		{"current_user", "current_user", RuleReservedName, 0},
		{"CURRENT_ROLE", "CURRENT_ROLE", RuleReservedName, 0},
		{"session_user", "session_user", RuleReservedName, 0},

		{"pg_", "pg_", RuleReservedPrefix, 0},
		{"pg_monitor", "pg_monitor", RuleReservedPrefix, 0},
		{"PG_read", "PG_read_all_data", RuleReservedPrefix, 0},
		{"windmill_admin", "windmill_admin", RuleReservedPrefix, 0},
		{"Windmill_x", "Windmill_x", RuleReservedPrefix, 0},
		{"custom_instance_user", "custom_instance_user", RuleReservedPrefix, 0},
		{"custom_instance_replication_user", "custom_instance_replication_user", RuleReservedPrefix, 0},
		{"CUSTOM_INSTANCE_x", "CUSTOM_INSTANCE_x", RuleReservedPrefix, 0},
		{"wm_set_", "wm_set_", RuleReservedPrefix, 0},
		{"wm_set_hash", "wm_set_0123456789abcdef0123456789abcdef01234567", RuleReservedPrefix, 0},
		{"WM_SET_x", "WM_SET_x", RuleReservedPrefix, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.in)
			if tc.rule == "" {
				require.NoError(t, err)
				return
			}
			var re *Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.rule, re.Rule)
			assert.Equal(t, tc.pos, re.Pos)
			assert.True(t, utf8.ValidString(re.Error()))
		})
	}
}

func TestValidateSelectable(t *testing.T) {
	cases := []struct {
		in string
		ok bool
	}{
		{"admin", true},
		{"sales", true},
		{"ADMIN", false},
		{"Admin", false},
		{"postgres", false},
		{"wm_set_x", false},
		{ViewerSentinel, false},
		{"", false},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			err := ValidateSelectable(tc.in)
			if tc.ok {
				assert.NoError(t, err)
			} else {
				var re *Error
				assert.ErrorAs(t, err, &re)
			}
		})
	}
	assert.True(t, IsAdmin("admin"))
	assert.False(t, IsAdmin("Admin"))
}

func TestQuoteIdent(t *testing.T) {
	cases := map[string]string{
		"sales":       `"sales"`,
		"Sales_Mixed": `"Sales_Mixed"`,
		"r-1":         `"r-1"`,
		`a"b`:         `"a""b"`,
		`""`:          `""""""`,
		"":            `""`,
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) { assert.Equal(t, want, QuoteIdent(in)) })
	}
}

func TestQuoteLiteral(t *testing.T) {
	cases := map[string]string{
		"sales":    `'sales'`,
		"o'brien":  `'o''brien'`,
		"''":       `''''''`,
		`a\b`:      `E'a\\b'`,
		`a\'b`:     `E'a\\''b'`,
		"":         `''`,
		"wm_set_1": `'wm_set_1'`,
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) { assert.Equal(t, want, QuoteLiteral(in)) })
	}
}

func TestSafeInput(t *testing.T) {
	assert.Equal(t, `a\x00b\x1b[31m`, SafeInput("a\x00b\x1b[31m"))
	assert.Equal(t, `r\xc3\xb4le`, SafeInput("rôle"))
	assert.Equal(t, `a\\b`, SafeInput(`a\b`))
	long := SafeInput(strings.Repeat("x", 500))
	assert.Equal(t, strings.Repeat("x", 80)+"...", long)
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{"sales", "admin", "ADMIN", "pg_x", "wm_set_abc", "$viewer", "a\"b", "", strings.Repeat("z", 64), "rôle", "custom_instance_user"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := Validate(s)
		if err != nil {
			var re *Error
			if !errors.As(err, &re) {
				t.Fatalf("error is %T, want *Error", err)
			}
			switch re.Rule {
			case RuleLength, RuleCharset, RuleReservedName, RuleReservedPrefix:
			default:
				t.Fatalf("unknown rule %q", re.Rule)
			}
			if len(re.Input) > 4*maxInputEcho+3 || !isPrintableASCII(re.Input) {
				t.Fatalf("unsafe Input %q", re.Input)
			}
			if ValidateSelectable(s) == nil && s != AdminRole {
				t.Fatalf("ValidateSelectable accepted %q that Validate refused", s)
			}
			return
		}
		// A valid name: the whitelist holds, quoting is trivial, nothing reserved slipped through.
		if len(s) < 1 || len(s) > MaxLen {
			t.Fatalf("accepted length %d", len(s))
		}
		for i := 0; i < len(s); i++ {
			if !isNameByte(s[i]) {
				t.Fatalf("accepted byte %q", s[i])
			}
		}
		l := strings.ToLower(s)
		for _, p := range reservedPrefixes {
			if strings.HasPrefix(l, p) {
				t.Fatalf("accepted reserved prefix in %q", s)
			}
		}
		if l == AdminRole || l == "postgres" || l == "public" {
			t.Fatalf("accepted reserved %q", s)
		}
		if QuoteIdent(s) != `"`+s+`"` || QuoteLiteral(s) != `'`+s+`'` {
			t.Fatalf("quoting changed a valid name %q", s)
		}
	})
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
