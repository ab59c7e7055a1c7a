package validate

import (
	"github.com/millwright/millwright/pkg/errs"
	"github.com/millwright/millwright/pkg/names"
)

// Field rules: the rule name a refusal carries for each kind of name (pkg/names defines them).
// Every service validates a field of one of these kinds with the function below, so the same
// bad value is refused by every service with the same rule; an empty value is RuleRequired.
const (
	RuleWorkspace  = "workspace"
	RuleUsername   = "username"
	RuleEmail      = "email"
	RuleGroupName  = "group_name"
	RuleFolderName = "folder_name"
	RulePath       = "path"
	RuleClusterID  = "cluster_id"
	RuleHost       = "host"
	RuleIdentifier = "identifier"
)

// wantName is what a group or folder name must be: the one rule of names.Group and
// names.Folder.
const wantName = "must be 1-50 characters of [a-z0-9_-], starting with a letter or digit"

// name is the shape of every field rule: required, then the name's predicate.
func name(field, v string, ok func(string) bool, rule, want string) error {
	if err := Required(field, v); err != nil {
		return err
	}
	if !ok(v) {
		return errs.InvalidField(field, rule, field+" "+want)
	}
	return nil
}

// Workspace refuses anything but a workspace id (names.Workspace).
func Workspace(field, v string) error {
	return name(field, v, names.Workspace, RuleWorkspace, "must be 1-50 characters of [a-z0-9_-], starting with a letter or digit")
}

// Username refuses anything but a username (names.Username).
func Username(field, v string) error {
	return name(field, v, names.Username, RuleUsername, "must be 1-50 characters of [a-z0-9_.-], starting with a letter or digit")
}

// OptionalUsername is Username that lets "" through (the field then means the caller).
func OptionalUsername(field, v string) error {
	if v == "" {
		return nil
	}
	return Username(field, v)
}

// Email refuses anything but an email in its canonical form (names.Email): lower-case ASCII;
// no folding.
func Email(field, v string) error {
	return name(field, v, names.Email, RuleEmail,
		"is not a canonical email: at most 255 bytes of lower-case ASCII, local@domain (no white space, no look-alike characters)")
}

// GroupName refuses anything but a group name (names.Group).
func GroupName(field, v string) error {
	return name(field, v, names.Group, RuleGroupName, wantName)
}

// FolderName refuses anything but a folder name (names.Folder).
func FolderName(field, v string) error {
	return name(field, v, names.Folder, RuleFolderName, wantName)
}

// Path refuses anything but a catalog path (names.Path).
func Path(field, v string) error {
	return name(field, v, names.Path, RulePath, "must be u/<username>/<name> or f/<folder>/<name>, at most 255 characters")
}

// ClusterID refuses anything but a cluster id (names.ClusterID).
func ClusterID(field, v string) error {
	return name(field, v, names.ClusterID, RuleClusterID, "must be 1-63 characters of [a-z0-9_-]")
}

// Host refuses anything but a host name or address (names.Host).
func Host(field, v string) error {
	return name(field, v, names.Host, RuleHost, "must be 1-253 characters of [A-Za-z0-9.:_-]")
}

// Identifier refuses anything but a PostgreSQL database or login name (names.Identifier).
func Identifier(field, v string) error {
	return name(field, v, names.Identifier, RuleIdentifier, "must be 1-63 characters of [A-Za-z0-9_$-]")
}
