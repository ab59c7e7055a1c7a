package rolename

import (
	"fmt"
	"strings"
)

const (
	// MaxLen is the longest role name, in bytes: Postgres truncates identifiers at
	// NAMEDATALEN-1 = 63 bytes, and two names that differ only after byte 63 would silently
	// become the same role.
	MaxLen = 63

	// AdminRole is the name callers use for the data table's admin connection (the owner of
	// the tables, which bypasses row-level security). It is not a catalog role and no catalog
	// role may take the name, in any case.
	AdminRole = "admin"

	// SetLoginPrefix starts the name of every role-set login (wm_set_<hash>). It is reserved
	// so that no catalog role can collide with, or be mistaken for, a set login.
	SetLoginPrefix = "wm_set_"

	// ViewerSentinel is the role name an agent worker sends to ask for the viewer's roles
	// (the agent form of ?as=viewer). The `$` is outside the role-name charset, so no catalog
	// role can ever have this name and an old server that treats it as a role name refuses
	// it as unknown instead of connecting as something else.
	ViewerSentinel = "$viewer"

	// NoneSentinel is the default_role value meaning "no default": a reference without a role
	// is refused. It is outside the charset for the same reason as ViewerSentinel.
	NoneSentinel = "$none"
)

// Rules reported in Error.Rule. They are stable identifiers: the API layer copies them into
// the ErrorInfo `rule` metadata and clients may branch on them.
const (
	RuleLength         = "length"
	RuleCharset        = "charset"
	RuleReservedPrefix = "reserved_prefix"
	RuleReservedName   = "reserved_name"
)

// reservedNames are refused case-insensitively. admin, postgres and public come from
// Windmill's validate_role_name; none, current_user, current_role and session_user are names
// Postgres itself refuses or treats as keywords in role positions, refused here so the error
// is a clean InvalidArgument instead of a failed CREATE ROLE.
var reservedNames = []string{
	AdminRole, "postgres", "public",
	"none", "current_user", "current_role", "session_user",
}

// reservedPrefixes are refused case-insensitively: Postgres' own roles (pg_), Windmill's
// service roles (windmill_, custom_instance_ which covers custom_instance_user, the admin
// login) and this service's set logins.
var reservedPrefixes = []string{"pg_", "windmill_", "custom_instance_", SetLoginPrefix}

// Error is a refused role name.
type Error struct {
	// Rule is one of the Rule* constants.
	Rule string
	// Input is the refused name, truncated and with unprintable bytes escaped, safe to log.
	Input string
	// Pos is the byte offset of the offending character for RuleCharset, else 0.
	Pos int
	// Detail says what was wrong, in words.
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("role name \"%s\": %s (rule %s)", e.Input, e.Detail, e.Rule)
}

func newError(rule, name string, pos int, detail string) *Error {
	return &Error{Rule: rule, Input: SafeInput(name), Pos: pos, Detail: detail}
}

// Validate reports whether name may be a catalog role's name: 1-63 bytes of [A-Za-z0-9_-],
// not a reserved name or prefix (case-insensitive). A valid name is safe to interpolate as a
// quoted identifier (QuoteIdent), as a literal (QuoteLiteral), after `-- role ` and in
// `?role=`. The error is always a *Error.
func Validate(name string) error {
	if len(name) == 0 || len(name) > MaxLen {
		return newError(RuleLength, name, 0, fmt.Sprintf("must be 1-%d bytes, got %d", MaxLen, len(name)))
	}
	// The sentinel is outside the charset anyway; it is checked first so the refusal says
	// what it is.
	if name == ViewerSentinel || name == NoneSentinel {
		return newError(RuleReservedName, name, 0, "is a sentinel, not a role name")
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return newError(RuleCharset, name, i, fmt.Sprintf("byte %d is not one of [A-Za-z0-9_-]", i))
		}
	}
	lower := strings.ToLower(name)
	for _, r := range reservedNames {
		if lower == r {
			return newError(RuleReservedName, name, 0, fmt.Sprintf("%q is reserved", r))
		}
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(lower, p) {
			return newError(RuleReservedPrefix, name, 0, fmt.Sprintf("the prefix %q is reserved", p))
		}
	}
	return nil
}

// ValidateSelectable reports whether a caller may name this role in a request (?role=, an
// agent worker's role field, a default role): exactly AdminRole, or a name Validate accepts.
// "ADMIN" or "Admin" are refused: they are not the admin connection and cannot be a catalog
// role either.
func ValidateSelectable(name string) error {
	if name == AdminRole {
		return nil
	}
	return Validate(name)
}

// IsAdmin reports whether a selectable name is the admin connection.
func IsAdmin(name string) bool { return name == AdminRole }

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// QuoteIdent double-quotes name as a Postgres identifier, doubling embedded double quotes.
// Quoting keeps the case (Sales and sales are different roles) and makes a name such as
// "a-b" legal. Use it only on names Validate accepted (or on wm_set_ logins built by this
// service): the whitelist is the safety, the quoting is the syntax.
func QuoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// QuoteLiteral single-quotes s as a Postgres string literal, doubling embedded single quotes.
// If s holds a backslash it is written as an escape string (E'...') with doubled
// backslashes, so the result means the same whatever standard_conforming_strings is. Put the
// result after whitespace or an operator, never glued to an identifier. It is meant for role
// names inside DO blocks (which take no parameters) and must never carry a plaintext
// password: log_statement=ddl logs the statement text.
func QuoteLiteral(s string) string {
	q := strings.ReplaceAll(s, `'`, `''`)
	if strings.Contains(q, `\`) {
		return `E'` + strings.ReplaceAll(q, `\`, `\\`) + `'`
	}
	return `'` + q + `'`
}

// maxInputEcho bounds the refused input echoed in errors and logs.
const maxInputEcho = 80

// SafeInput renders untrusted input for an error message or a log line: at most 80 bytes,
// printable ASCII kept, every other byte written as \xNN, and "..." appended when truncated.
func SafeInput(s string) string {
	var b strings.Builder
	n := len(s)
	truncated := false
	if n > maxInputEcho {
		n = maxInputEcho
		truncated = true
	}
	for i := 0; i < n; i++ {
		c := s[i]
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	if truncated {
		b.WriteString("...")
	}
	return b.String()
}
