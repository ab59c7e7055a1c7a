package datatableref

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

const (
	// Scheme is the only accepted prefix, lowercase and with the two slashes. The bare
	// `datatable` and `datatable://` forms (Windmill's DuckDB shorthand for main) are
	// refused: the worker expands them to datatable://main before asking, so the service
	// never guesses a name.
	Scheme = "datatable://"

	// DefaultName is the data table Windmill calls the default. It gets no special treatment
	// here; it is exported for callers expanding shorthands.
	DefaultName = "main"

	// ViewerSentinel is the agent worker's role value meaning "connect as the viewer"
	// (the agent form of ?as=viewer). It cannot be a role name: `$` is outside the
	// role-name charset, and rolename.Validate reserves it by name as well.
	ViewerSentinel = rolename.ViewerSentinel

	// MaxLen bounds a reference. The longest valid one
	// (datatable://<63>?role=<63>) is 144 bytes.
	MaxLen = 256

	// MaxNameLen is the longest data-table name.
	MaxNameLen = 63

	keyRole   = "role"
	keyAs     = "as"
	valViewer = "viewer"
)

// Rules reported in Error.Rule: stable identifiers, copied into the ErrorInfo `rule`
// metadata of ERROR_REASON_MALFORMED_REFERENCE.
const (
	RuleTooLong         = "too_long"         // longer than MaxLen
	RuleWhitespace      = "whitespace"       // any Unicode white space, anywhere
	RuleControlChar     = "control_char"     // C0/C1 controls, DEL
	RuleNonASCII        = "non_ascii"        // any other byte >= 0x80 (also invalid UTF-8)
	RulePercentEncoding = "percent_encoding" // any '%': no escaping is accepted
	RuleFragment        = "fragment"         // any '#'
	RuleBadScheme       = "bad_scheme"       // not starting with datatable://
	RuleEmptyName       = "empty_name"       // datatable:// or datatable://?...
	RuleBadName         = "bad_name"         // not [A-Za-z0-9_-]{1,63} (so no userinfo, host, port, path)
	RuleMalformedQuery  = "malformed_query"  // empty query, second '?', empty parameter, no '=', empty key
	RuleUnknownKey      = "unknown_key"      // a key other than role or as
	RuleDuplicateKey    = "duplicate_key"    // a key given twice, in any case
	RuleEmptyValue      = "empty_value"      // role= or as=
	RuleRoleWithAs      = "role_with_as"     // role and as together
	RuleAsNotViewer     = "as_not_viewer"    // as=<anything but viewer>
	RuleBadRole         = "bad_role"         // a role that is neither admin nor a valid role name
)

// Fields named in Error.Field, matching the request fields of ResolveConnectionRequest.
const (
	FieldReference = "reference"
	FieldDatatable = "datatable"
	FieldRole      = "role"
)

// Ref is a parsed reference. At most one of Role and AsViewer is set; neither means the
// data table's default role.
type Ref struct {
	// Name is the data table's name.
	Name string
	// Role is the role the caller named: "admin" or a valid catalog role name.
	Role string
	// AsViewer asks for every role the run's viewer is a tenant of.
	AsViewer bool
}

// String renders the canonical reference; Parse(r.String()) == r for every Ref Parse or
// FromAgent returned.
func (r Ref) String() string {
	switch {
	case r.AsViewer:
		return Scheme + r.Name + "?" + keyAs + "=" + valViewer
	case r.Role != "":
		return Scheme + r.Name + "?" + keyRole + "=" + r.Role
	default:
		return Scheme + r.Name
	}
}

// AgentFields renders r as an agent worker's datatable + role fields; FromAgent inverts it.
func (r Ref) AgentFields() (datatable, role string) {
	if r.AsViewer {
		return r.Name, ViewerSentinel
	}
	return r.Name, r.Role
}

// Error is a refused reference.
type Error struct {
	// Rule is one of the Rule* constants.
	Rule string
	// Field is the request field the input came from (FieldReference, FieldDatatable or
	// FieldRole).
	Field string
	// Input is the refused input, truncated, with unprintable bytes escaped and any
	// userinfo before an '@' replaced by ***: safe to log and to return.
	Input string
	// Pos is the byte offset in the original input where the problem was found.
	Pos int
	// Detail says what was wrong, in words.
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("malformed data-table %s \"%s\" at byte %d: %s (rule %s)",
		e.Field, e.Input, e.Pos, e.Detail, e.Rule)
}

func fail(rule, field, input string, pos int, format string, args ...any) *Error {
	return &Error{
		Rule:   rule,
		Field:  field,
		Input:  rolename.SafeInput(redactUserinfo(input)),
		Pos:    pos,
		Detail: fmt.Sprintf(format, args...),
	}
}

// redactUserinfo hides what sits between "://" and the last '@' of the authority, where a
// pasted connection URL would carry a password.
func redactUserinfo(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	rest := s[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return s
	}
	return s[:i+3] + "***" + rest[at:]
}

// Parse parses a reference. Every error is a *Error. Accepted:
//
//	datatable://<name>
//	datatable://<name>?role=<role>
//	datatable://<name>?as=viewer
//
// <name> is [A-Za-z0-9_-]{1,63}; <role> is "admin" or a name rolename.Validate accepts.
// Keys are case-insensitive (Windmill reads ROLE= as role=), so role=a&ROLE=b is a duplicate;
// the value viewer is case-sensitive. Nothing is decoded: '%', '+'-as-space and every other
// escape are refused rather than interpreted, because no valid name needs one and two
// decoders disagreeing is how a reference gets read as two different things.
func Parse(ref string) (Ref, error) {
	const f = FieldReference
	if len(ref) > MaxLen {
		return Ref{}, fail(RuleTooLong, f, ref, MaxLen, "longer than %d bytes", MaxLen)
	}
	if err := checkBytes(f, ref); err != nil {
		return Ref{}, err
	}
	if !strings.HasPrefix(ref, Scheme) {
		return Ref{}, fail(RuleBadScheme, f, ref, 0, "must start with %q", Scheme)
	}
	rest := ref[len(Scheme):]
	base := len(Scheme)
	name, query, hasQuery := strings.Cut(rest, "?")
	if name == "" {
		return Ref{}, fail(RuleEmptyName, f, ref, base, "no data-table name")
	}
	if err := checkName(f, ref, name, base); err != nil {
		return Ref{}, err
	}
	r := Ref{Name: name}
	if !hasQuery {
		return r, nil
	}
	qpos := base + len(name) + 1
	if query == "" {
		return Ref{}, fail(RuleMalformedQuery, f, ref, qpos, "empty query after '?'")
	}
	if i := strings.IndexByte(query, '?'); i >= 0 {
		return Ref{}, fail(RuleMalformedQuery, f, ref, qpos+i, "a second '?'")
	}
	var role string
	var haveRole, haveAs bool
	pos := qpos
	for _, param := range strings.Split(query, "&") {
		if param == "" {
			return Ref{}, fail(RuleMalformedQuery, f, ref, pos, "empty parameter")
		}
		key, val, hasEq := strings.Cut(param, "=")
		if !hasEq {
			return Ref{}, fail(RuleMalformedQuery, f, ref, pos, "parameter without '='")
		}
		if key == "" {
			return Ref{}, fail(RuleMalformedQuery, f, ref, pos, "parameter without a key")
		}
		vpos := pos + len(key) + 1
		switch strings.ToLower(key) {
		case keyRole:
			if haveRole {
				return Ref{}, fail(RuleDuplicateKey, f, ref, pos, "role given twice")
			}
			haveRole, role = true, val
		case keyAs:
			if haveAs {
				return Ref{}, fail(RuleDuplicateKey, f, ref, pos, "as given twice")
			}
			haveAs = true
		default:
			return Ref{}, fail(RuleUnknownKey, f, ref, pos, "unknown key (only role and as are known)")
		}
		if val == "" {
			return Ref{}, fail(RuleEmptyValue, f, ref, vpos, "empty value")
		}
		if haveRole && haveAs {
			return Ref{}, fail(RuleRoleWithAs, f, ref, pos, "role and as cannot be combined")
		}
		if strings.EqualFold(key, keyAs) && val != valViewer {
			return Ref{}, fail(RuleAsNotViewer, f, ref, vpos, "as only takes the value viewer")
		}
		if strings.EqualFold(key, keyRole) {
			if err := rolename.ValidateSelectable(val); err != nil {
				return Ref{}, badRole(f, ref, vpos, err)
			}
		}
		pos += len(param) + 1
	}
	r.Role = role
	r.AsViewer = haveAs
	return r, nil
}

// FromAgent builds a Ref from an agent worker's fields. An empty role means the default role;
// ViewerSentinel means the viewer's roles; anything else must be "admin" or a valid role name.
// Both fields get the same byte checks as a reference. Every error is a *Error naming the field.
func FromAgent(datatable, role string) (Ref, error) {
	if len(datatable) > MaxLen {
		return Ref{}, fail(RuleTooLong, FieldDatatable, datatable, MaxLen, "longer than %d bytes", MaxLen)
	}
	if len(role) > MaxLen {
		return Ref{}, fail(RuleTooLong, FieldRole, role, MaxLen, "longer than %d bytes", MaxLen)
	}
	if err := checkBytes(FieldDatatable, datatable); err != nil {
		return Ref{}, err
	}
	if err := checkBytes(FieldRole, role); err != nil {
		return Ref{}, err
	}
	if datatable == "" {
		return Ref{}, fail(RuleEmptyName, FieldDatatable, datatable, 0, "no data-table name")
	}
	if err := checkName(FieldDatatable, datatable, datatable, 0); err != nil {
		return Ref{}, err
	}
	switch role {
	case "":
		return Ref{Name: datatable}, nil
	case ViewerSentinel:
		return Ref{Name: datatable, AsViewer: true}, nil
	}
	if err := rolename.ValidateSelectable(role); err != nil {
		return Ref{}, badRole(FieldRole, role, 0, err)
	}
	return Ref{Name: datatable, Role: role}, nil
}

func badRole(field, input string, pos int, err error) *Error {
	detail := err.Error()
	re := &rolename.Error{}
	if errors.As(err, &re) {
		pos += re.Pos
		detail = re.Detail + " (" + re.Rule + ")"
	}
	return fail(RuleBadRole, field, input, pos, "role %s", detail)
}

// checkBytes refuses, anywhere in s, white space, control characters, non-ASCII bytes, '%'
// and '#'. It runs before any structural parsing so no later step sees them.
func checkBytes(field, s string) *Error {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
				return fail(RuleWhitespace, field, s, i, "white space")
			case c < 0x20 || c == 0x7f:
				return fail(RuleControlChar, field, s, i, "control character 0x%02x", c)
			case c == '%':
				return fail(RulePercentEncoding, field, s, i, "percent-encoding is not accepted")
			case c == '#':
				return fail(RuleFragment, field, s, i, "fragments are not accepted")
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return fail(RuleNonASCII, field, s, i, "invalid UTF-8")
		case unicode.IsSpace(r):
			return fail(RuleWhitespace, field, s, i, "white space U+%04X", r)
		case unicode.IsControl(r):
			return fail(RuleControlChar, field, s, i, "control character U+%04X", r)
		default:
			return fail(RuleNonASCII, field, s, i, "non-ASCII character U+%04X", r)
		}
	}
	return nil
}

// checkName refuses a data-table name outside [A-Za-z0-9_-]{1,63}. That also refuses every
// userinfo, host, port and path trick (@ : / [ ] . \) and Windmill's literal-'?' names.
func checkName(field, input, name string, base int) *Error {
	if len(name) > MaxNameLen {
		return fail(RuleBadName, field, input, base+MaxNameLen, "data-table name longer than %d bytes", MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return fail(RuleBadName, field, input, base+i, "data-table name byte %q is not one of [A-Za-z0-9_-]", c)
		}
	}
	return nil
}

// ValidName reports whether name is a valid data-table name ([A-Za-z0-9_-]{1,63}).
func ValidName(name string) bool {
	return name != "" && checkName("", name, name, 0) == nil
}
