package rulebook

import (
	"regexp"
	"strings"

	"github.com/millwright/millwright/pkg/names"
)

// Limits shared by validation and storage. The names themselves (workspace, username, email,
// group, folder, path) are defined once for every service in pkg/names.
const (
	MaxListItems = 1000 // every repeated request field
	MaxPathLen   = names.MaxPathLen
	MaxLabelLen  = 100
	MaxNameLen   = 200 // workspace display name
	MaxScopes    = 64
	MaxArgsBytes = 1 << 20
)

var (
	reHash    = regexp.MustCompile(`^[0-9a-f]{16}$`)
	reTag     = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)
	reScope   = regexp.MustCompile(`^[a-z][a-z_]*(:[a-z0-9_*./-]+){1,4}$`)
	reUUID    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	reJobKind = regexp.MustCompile(`^[a-z][a-z_]{0,49}$`)
)

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

// Path is a parsed runnable path: u/<owner>/<rest> or f/<folder>/<rest>.
type Path struct {
	Space string // "u" or "f"
	Owner string // the username (u) or folder name (f)
	Rest  string
}

// ParsePath parses a catalog path (names.Path). Hub paths and anything else are refused: only
// workspace items live in the catalog.
func ParsePath(p string) (Path, bool) {
	if !names.Path(p) {
		return Path{}, false
	}
	parts := strings.SplitN(p, "/", 3)
	return Path{Space: parts[0], Owner: parts[1], Rest: parts[2]}, true
}

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
	case kind == "u" && names.Username(name), kind == "g" && names.Group(name):
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
