package policy

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Limits shared by validation and storage.
const (
	MaxListItems = 1000 // every repeated request field
	MaxPathLen   = 255
	MaxEmailLen  = 255
	MaxLabelLen  = 100
	MaxNameLen   = 200 // workspace display name
	MaxScopes    = 64
	MaxArgsBytes = 1 << 20
)

var (
	reWorkspace = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,49}$`)
	reUsername  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,49}$`)
	reName      = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,49}$`) // groups and folders
	reSegment   = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$`)
	reHash      = regexp.MustCompile(`^[0-9a-f]{16}$`)
	reTag       = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)
	reScope     = regexp.MustCompile(`^[a-z][a-z_]*(:[a-z0-9_*./-]+){1,4}$`)
	reUUID      = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	reJobKind   = regexp.MustCompile(`^[a-z][a-z_]{0,49}$`)
)

// ValidWorkspace: 1-50 chars of [a-z0-9_-], not starting with - or _.
func ValidWorkspace(s string) bool { return reWorkspace.MatchString(s) }

// ValidUsername: 1-50 chars of [a-z0-9_.-], starting with a letter or digit.
func ValidUsername(s string) bool { return reUsername.MatchString(s) }

// ValidGroupName and ValidFolderName: 1-50 chars of [a-z0-9_-]. No comma, slash or dot, which
// matters: names travel into the row-level-security settings as comma-separated lists.
func ValidGroupName(s string) bool { return reName.MatchString(s) }

// ValidFolderName is ValidGroupName for folders.
func ValidFolderName(s string) bool { return reName.MatchString(s) }

// ValidHash is Windmill's ScriptHash as text: exactly 16 lowercase hex digits. Uppercase is
// refused rather than folded, so one hash has one spelling and pins compare byte for byte.
func ValidHash(s string) bool { return reHash.MatchString(s) }

// ValidTag is a worker tag name.
func ValidTag(s string) bool { return reTag.MatchString(s) }

// ValidScope is a token scope such as "apps:write" or "jobs:run".
func ValidScope(s string) bool { return len(s) <= 100 && reScope.MatchString(s) }

// ValidJobID is a lowercase UUID.
func ValidJobID(s string) bool { return reUUID.MatchString(s) }

// ValidJobKind is a result-cache job kind such as "script" or "flow".
func ValidJobKind(s string) bool { return reJobKind.MatchString(s) }

// ValidEmail is deliberately loose (one @, no whitespace, comma or control characters, at most
// 255 characters): the platform owns email syntax; policy only needs it to be one token.
func ValidEmail(s string) bool {
	if s == "" || len(s) > MaxEmailLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == ',' || r == 0x7f {
			return false
		}
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && domain != "" && !strings.Contains(domain, "@")
}

// Path is a parsed runnable path: u/<owner>/<rest> or f/<folder>/<rest>.
type Path struct {
	Space string // "u" or "f"
	Owner string // the username (u) or folder name (f)
	Rest  string
}

// ParsePath parses a catalog path. Hub paths and anything else are refused: only workspace
// items live in the catalog.
func ParsePath(p string) (Path, bool) {
	if len(p) > MaxPathLen {
		return Path{}, false
	}
	parts := strings.Split(p, "/")
	if len(parts) < 3 {
		return Path{}, false
	}
	for _, seg := range parts[2:] {
		if !reSegment.MatchString(seg) {
			return Path{}, false
		}
	}
	switch parts[0] {
	case "u":
		if !ValidUsername(parts[1]) {
			return Path{}, false
		}
	case "f":
		if !ValidFolderName(parts[1]) {
			return Path{}, false
		}
	default:
		return Path{}, false
	}
	return Path{Space: parts[0], Owner: parts[1], Rest: strings.Join(parts[2:], "/")}, true
}

// ValidPath reports whether ParsePath accepts p.
func ValidPath(p string) bool { _, ok := ParsePath(p); return ok }

// Principal is "u/<username>" or "g/<group>".
type Principal struct {
	Kind string // "u" or "g"
	Name string
}

// String returns the principal's wire form.
func (p Principal) String() string { return p.Kind + "/" + p.Name }

// ParsePrincipal parses "u/<username>" or "g/<group>".
func ParsePrincipal(s string) (Principal, bool) {
	kind, name, ok := strings.Cut(s, "/")
	switch {
	case !ok:
		return Principal{}, false
	case kind == "u" && ValidUsername(name), kind == "g" && ValidGroupName(name):
		return Principal{Kind: kind, Name: name}, true
	}
	return Principal{}, false
}

// Role is a member's role in a workspace.
type Role string

// Roles.
const (
	RoleAdmin     Role = "admin"
	RoleDeveloper Role = "developer"
	RoleOperator  Role = "operator"
)

// Valid reports whether r is one of the three roles.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleDeveloper || r == RoleOperator }

// Kind is the kind of a catalog item.
type Kind string

// Catalog kinds.
const (
	KindScript Kind = "script"
	KindFlow   Kind = "flow"
	KindApp    Kind = "app"
)

// Valid reports whether k is a catalog kind.
func (k Kind) Valid() bool { return k == KindScript || k == KindFlow || k == KindApp }

// Ref names a catalog item for a readability check.
type Ref struct {
	Kind Kind
	Path string
}

// Pin is a version-pinned script step: (path, hash). A step carrying a hash is dispatched by
// the hash alone, so the pair must be checked, not just the path.
type Pin struct {
	Path string
	Hash string
}
