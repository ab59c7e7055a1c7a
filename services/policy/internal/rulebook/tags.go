package rulebook

// TagRule is one worker tag a workspace may use.
type TagRule struct {
	Name       string
	Privileged bool
}

// CheckTags allows a tag only if the workspace lists it, and a privileged one only for admins
// and developers. It returns the first refused tag, in request order. An unknown role is
// treated as an operator (the narrowest).
func CheckTags(rules []TagRule, role Role, tags []string) error {
	byName := make(map[string]bool, len(rules))
	for _, r := range rules {
		byName[r.Name] = r.Privileged
	}
	for _, t := range tags {
		priv, ok := byName[t]
		switch {
		case !ok:
			return &TagError{Tag: t, Reason: "unknown"}
		case priv && role != RoleAdmin && role != RoleDeveloper:
			return &TagError{Tag: t, Reason: "privileged"}
		}
	}
	return nil
}
