package rulebook

import (
	"errors"
	"fmt"
)

// Domain errors. The store and the rules return these (possibly wrapped); internal/api maps
// each to one gRPC code and ErrorInfo reason.
var (
	ErrNotFound         = errors.New("not found")
	ErrAlreadyExists    = errors.New("already exists")
	ErrNotMember        = errors.New("not a member of the workspace")
	ErrMemberDisabled   = errors.New("member is disabled")
	ErrWrongWorkspace   = errors.New("credential belongs to another workspace")
	ErrBadCredential    = errors.New("credential is unknown, expired or revoked")
	ErrBuilderOff       = errors.New("operators cannot build flows or apps in this workspace")
	ErrLastAdmin        = errors.New("the workspace would have no enabled admin")
	ErrHashTaken        = errors.New("script hash already belongs to another path")
	ErrPermissionedAs   = errors.New("permissioned_as must match the parent run")
	ErrCredentialNeeded = errors.New("origin requires a credential")
	ErrCredentialUnused = errors.New("origin takes no credential")
)

// NotFoundError names what was not found.
type NotFoundError struct {
	Kind, Name string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %q not found", e.Kind, e.Name) }

// Unwrap makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// NotFound returns a NotFoundError.
func NotFound(kind, name string) error { return &NotFoundError{Kind: kind, Name: name} }

// TagError names the refused tag.
type TagError struct {
	Tag    string
	Reason string // "unknown" or "privileged"
}

func (e *TagError) Error() string {
	if e.Reason == "privileged" {
		return fmt.Sprintf("worker tag %q is privileged: not available to operators", e.Tag)
	}
	return fmt.Sprintf("worker tag %q is not available in this workspace", e.Tag)
}

// UnreadableError names the first runnable the caller cannot read.
type UnreadableError struct {
	Ref Ref
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("%s %q is not readable by the caller", e.Ref.Kind, e.Ref.Path)
}
