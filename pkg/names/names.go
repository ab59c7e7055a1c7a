package names

import (
	"regexp"
	"strings"
)

// Limits of the names below.
const (
	MaxNameLen  = 50  // workspace ids, usernames, group and folder names
	MaxEmailLen = 255 // an email, in bytes (all ASCII)
	MaxPathLen  = 255 // a runnable path
	MaxIDLen    = 63  // cluster ids and PostgreSQL identifiers (NAMEDATALEN - 1)
	MaxHostLen  = 253 // a DNS name
)

var (
	reWorkspace  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,49}$`)
	reUsername   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,49}$`)
	reName       = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,49}$`) // groups and folders
	reSegment    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$`)
	reClusterID  = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)
	reHost       = regexp.MustCompile(`^[A-Za-z0-9.:_-]{1,253}$`)
	reIdentifier = regexp.MustCompile(`^[A-Za-z0-9_$-]{1,63}$`)
	// An email is lower-case ASCII: a local part of RFC 5322 atext and dots, one @, and a
	// domain of dot-separated labels (letters, digits, inner hyphens).
	reEmail = regexp.MustCompile(`^[a-z0-9!#$%&'*+/=?^_` + "`" + `{|}~.-]+@[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
)

// Workspace is a workspace id: 1-50 characters of [a-z0-9_-], starting with a letter or digit.
func Workspace(s string) bool { return reWorkspace.MatchString(s) }

// Username is 1-50 characters of [a-z0-9_.-], starting with a letter or digit.
func Username(s string) bool { return reUsername.MatchString(s) }

// Group is a group name: 1-50 characters of [a-z0-9_-], starting with a letter or digit. No
// comma, slash or dot, which matters: names travel into row-level-security settings as
// comma-separated lists.
func Group(s string) bool { return reName.MatchString(s) }

// Folder is a folder name, under the rule of Group.
func Folder(s string) bool { return reName.MatchString(s) }

// Email is the canonical form of an email, the seat identity billing counts and the viewer
// identity policy records: at most 255 bytes of lower-case ASCII, a non-empty local part of
// letters, digits, dots and !#$%&'*+/=?^_`{|}~-, one @, and a domain of dot-separated labels of
// letters, digits and inner hyphens. Upper case, white space of any kind (U+00A0 included),
// quoted local parts, non-ASCII (U+212A KELVIN SIGN, full-width letters, IDN in Unicode form:
// send its xn-- form) are refused rather than folded: one person has one spelling, and no
// service decides alone that two spellings are the same person.
func Email(s string) bool { return len(s) <= MaxEmailLen && reEmail.MatchString(s) }

// Path is a catalog path, u/<username>/<name...> or f/<folder>/<name...>, at most 255 bytes,
// each name segment 1-100 characters of [A-Za-z0-9_.-] not starting with '.' or '-'.
func Path(p string) bool {
	if len(p) > MaxPathLen {
		return false
	}
	parts := strings.Split(p, "/")
	if len(parts) < 3 {
		return false
	}
	for _, seg := range parts[2:] {
		if !reSegment.MatchString(seg) {
			return false
		}
	}
	switch parts[0] {
	case "u":
		return Username(parts[1])
	case "f":
		return Folder(parts[1])
	}
	return false
}

// ClusterID is a target cluster's id: 1-63 characters of [a-z0-9_-].
func ClusterID(s string) bool { return reClusterID.MatchString(s) }

// Host is a host name or address: 1-253 characters of [A-Za-z0-9.:_-].
func Host(s string) bool { return reHost.MatchString(s) }

// Identifier is a PostgreSQL database or login name as millwright accepts one: 1-63
// characters of [A-Za-z0-9_$-].
func Identifier(s string) bool { return reIdentifier.MatchString(s) }
