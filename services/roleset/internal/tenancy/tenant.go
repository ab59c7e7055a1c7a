package tenancy

import (
	"fmt"

	"github.com/millwright/millwright/services/roleset/internal/rolename"
)

// TenantKind is the form of a tenant entry.
type TenantKind string

const (
	// TenantUser is u/<username>.
	TenantUser TenantKind = "u"
	// TenantGroup is g/<group>.
	TenantGroup TenantKind = "g"
	// TenantFolder is f/<folder>.
	TenantFolder TenantKind = "f"
	// TenantEveryone is *: every member of the governing workspace.
	TenantEveryone TenantKind = "*"
)

// Name limits: a username is VARCHAR(50) in Windmill (usr, job_perms); groups and folders
// are bounded generously, only to keep input small.
const (
	MaxUserLen   = 50
	MaxGroupLen  = 255
	MaxFolderLen = 255
)

// Rules reported in TenantError.Rule.
const (
	RuleTenantEmpty   = "tenant_empty"   // "" or a kind with no name (u/)
	RuleTenantKind    = "tenant_kind"    // not u/, g/, f/ or exactly *
	RuleTenantLength  = "tenant_length"  // the name is too long
	RuleTenantCharset = "tenant_charset" // a byte outside the kind's charset (white space, '/', ...)
)

// Tenant is one entry of a role's tenant list. The zero Tenant is invalid and names nobody.
type Tenant struct {
	Kind TenantKind
	// Name is empty for TenantEveryone.
	Name string
}

// String renders the canonical form; ParseTenant(t.String()) == t for every parsed t.
func (t Tenant) String() string {
	if t.Kind == TenantEveryone {
		return "*"
	}
	return string(t.Kind) + "/" + t.Name
}

// TenantError is a refused tenant entry.
type TenantError struct {
	Rule  string
	Input string // truncated, unprintable bytes escaped
	Pos   int
}

func (e *TenantError) Error() string {
	return fmt.Sprintf("tenant \"%s\": invalid at byte %d (rule %s); want u/<user>, g/<group>, f/<folder> or *",
		e.Input, e.Pos, e.Rule)
}

func tenantErr(rule, s string, pos int) *TenantError {
	return &TenantError{Rule: rule, Input: rolename.SafeInput(s), Pos: pos}
}

// ParseTenant parses u/<user>, g/<group>, f/<folder> or *. The kind letter is lowercase; no
// white space, no second slash, no empty name. Charsets follow Windmill:
//
//	user:   [A-Za-z][A-Za-z0-9_]*  (VALID_USERNAME), at most 50 bytes
//	folder: [A-Za-z0-9_]+          (VALID_FOLDER_NAME), at most 255 bytes
//	group:  [A-Za-z0-9_.-]+        at most 255 bytes; Windmill does not validate group
//	        names server-side, and instance groups synced from an identity provider keep
//	        '-' and '.', so those two are accepted as well.
//
// Every error is a *TenantError.
func ParseTenant(s string) (Tenant, error) {
	if s == "" {
		return Tenant{}, tenantErr(RuleTenantEmpty, s, 0)
	}
	if s == "*" {
		return Tenant{Kind: TenantEveryone}, nil
	}
	if len(s) < 2 || s[1] != '/' {
		return Tenant{}, tenantErr(RuleTenantKind, s, 0)
	}
	kind := TenantKind(s[:1])
	name := s[2:]
	var max int
	var ok func(i int, c byte) bool
	switch kind {
	case TenantUser:
		max, ok = MaxUserLen, func(i int, c byte) bool { return isAlpha(c) || i > 0 && (isDigit(c) || c == '_') }
	case TenantGroup:
		max, ok = MaxGroupLen, func(_ int, c byte) bool { return isAlpha(c) || isDigit(c) || c == '_' || c == '.' || c == '-' }
	case TenantFolder:
		max, ok = MaxFolderLen, func(_ int, c byte) bool { return isAlpha(c) || isDigit(c) || c == '_' }
	default:
		return Tenant{}, tenantErr(RuleTenantKind, s, 0)
	}
	if name == "" {
		return Tenant{}, tenantErr(RuleTenantEmpty, s, 2)
	}
	if len(name) > max {
		return Tenant{}, tenantErr(RuleTenantLength, s, 2+max)
	}
	for i := 0; i < len(name); i++ {
		if !ok(i, name[i]) {
			return Tenant{}, tenantErr(RuleTenantCharset, s, 2+i)
		}
	}
	return Tenant{Kind: kind, Name: name}, nil
}

// ParseTenants parses a tenant list, refusing the whole list on the first bad entry (a list
// is written whole, so a partial one is never stored). Duplicates are dropped, first kept.
func ParseTenants(list []string) ([]Tenant, error) {
	out := make([]Tenant, 0, len(list))
	seen := make(map[Tenant]bool, len(list))
	for i, s := range list {
		t, err := ParseTenant(s)
		if err != nil {
			return nil, fmt.Errorf("tenants[%d]: %w", i, err)
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
