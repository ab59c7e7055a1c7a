package rulebook

import "slices"

// FolderAccess is one folder a member can read.
type FolderAccess struct {
	Name  string
	Read  bool
	Write bool
	Owner bool
}

// Tenancy is who a member is in a workspace.
type Tenancy struct {
	Workspace string
	Username  string
	Email     string
	Role      Role
	Disabled  bool
	Groups    []string       // sorted
	Folders   []FolderAccess // sorted by name; only folders with at least read
}

// IsAdmin reports an admin role.
func (t Tenancy) IsAdmin() bool { return t.Role == RoleAdmin }

// IsOperator reports an operator role.
func (t Tenancy) IsOperator() bool { return t.Role == RoleOperator }

// Principals returns "u/<username>" and "g/<group>" for each group: what grants name.
func (t Tenancy) Principals() []string {
	out := make([]string, 0, 1+len(t.Groups))
	out = append(out, "u/"+t.Username)
	for _, g := range t.Groups {
		out = append(out, "g/"+g)
	}
	return out
}

// ReadableFolders returns the names of the folders the member can read.
func (t Tenancy) ReadableFolders() []string {
	out := make([]string, 0, len(t.Folders))
	for _, f := range t.Folders {
		if f.Read {
			out = append(out, f.Name)
		}
	}
	return out
}

// FolderGrants is a folder and the principals it names.
type FolderGrants struct {
	Name    string
	Owners  []string
	Readers []string
	Writers []string
}

// AccessTo computes a member's access to a folder from its grants: owners read, write and
// manage; writers read and write; readers read. A folder naming none of the principals gives
// no access (ok false).
func AccessTo(principals []string, f FolderGrants) (FolderAccess, bool) {
	names := func(list []string) bool {
		for _, p := range list {
			if slices.Contains(principals, p) {
				return true
			}
		}
		return false
	}
	a := FolderAccess{Name: f.Name}
	a.Owner = names(f.Owners)
	a.Write = a.Owner || names(f.Writers)
	a.Read = a.Write || names(f.Readers)
	return a, a.Read
}

// Normalize sorts and deduplicates a list of names. It never returns nil, so an empty list is
// stored as an empty array, not NULL.
func Normalize(list []string) []string {
	out := append([]string{}, list...)
	slices.Sort(out)
	return slices.Compact(out)
}
