package engine

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/target"
	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Code classifies a refusal; internal/api maps each one to a gRPC code and ErrorInfo reason,
// in a switch that has no default mapping: a Code it does not name is an internal error, and
// a test walks Codes() so that a new Code without a mapping fails it.
type Code int

const (
	// CodeInvalid is bad input (Field and Rule say which).
	CodeInvalid Code = iota + 1
	// CodeMalformedReference is a reference the strict parser refused.
	CodeMalformedReference
	// CodeReservedName is a role name that is reserved or unsafe.
	CodeReservedName
	// CodeNotFound is an unknown data table, role or cluster.
	CodeNotFound
	// CodeAlreadyExists is a name that is taken.
	CodeAlreadyExists
	// CodeNoViewer is ?as=viewer on a run without a recorded viewer.
	CodeNoViewer
	// CodeNoRole is: no role's tenants name the subject, or no default role.
	CodeNoRole
	// CodeRoleDisabled is a disabled role (never replaced by another).
	CodeRoleDisabled
	// CodeUnauthenticated is a missing or refused job token.
	CodeUnauthenticated
	// CodeNotMember is a subject that is not an enabled member of the workspace.
	CodeNotMember
	// CodeNotOurs is a role on the target cluster under one of our names whose ownership proof
	// does not verify: never adopted or taken back (Field: the role name).
	CodeNotOurs
	// CodeTampered is a role of ours that someone else changed in a way we cannot undo, or
	// that failed the check after the reset (Field: the role name, Rule: the check).
	CodeTampered
	// CodeViewerAccessOff is ?as=viewer on a data table that has not opted in to it.
	CodeViewerAccessOff
	// CodeProxyOff is a data table in proxy mode on a roleset that runs no proxy.
	CodeProxyOff

	codeEnd // one past the last Code; add new Codes above
)

// Codes lists every Code.
func Codes() []Code {
	out := make([]Code, 0, codeEnd-1)
	for c := CodeInvalid; c < codeEnd; c++ {
		out = append(out, c)
	}
	return out
}

// Error is a refusal with what a client needs to act on it.
type Error struct {
	Code  Code
	Msg   string
	Field string
	Rule  string
	Kind  string // NotFound, AlreadyExists: what kind of object
	// Existing is AlreadyExists' existing object, as its kind's Get takes it (a role's id); ""
	// when the name is held by something that is not millwright's.
	Existing string
	Trace    tenancy.Trace
}

func (e *Error) Error() string { return e.Msg }

func refuse(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// roleTaken is CreateRole's refusal of a name the catalog holds: it names the role's id, so a
// client whose first CreateRole answer was lost reads the role back with GetRole.
func roleTaken(r store.Role) *Error {
	return &Error{Code: CodeAlreadyExists, Kind: "role", Existing: strconv.FormatInt(r.ID, 10),
		Msg: fmt.Sprintf("role %q exists: role_id %d", r.Name, r.ID)}
}

// roleNotInCatalog is the refusal of a name held on the cluster by a role the catalog does not
// have: there is nothing of ours to read back.
func roleNotInCatalog(name string) *Error {
	return &Error{Code: CodeAlreadyExists, Kind: "role",
		Msg: fmt.Sprintf("a role named %q exists on the cluster and is not in the catalog (not millwright's): there is no role_id to read back", name)}
}

func invalid(field, rule, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// clusterRefusal turns the target package's ownership refusals into Errors; other errors pass.
func clusterRefusal(role string, err error) error {
	var te *target.TamperedError
	switch {
	case errors.Is(err, target.ErrNotOurs):
		return &Error{Code: CodeNotOurs, Field: role,
			Msg: fmt.Sprintf("a role named %s exists on the cluster and is not provably this instance's; it is left alone", role)}
	case errors.As(err, &te):
		return &Error{Code: CodeTampered, Field: role, Rule: te.Check,
			Msg: fmt.Sprintf("role %s on the cluster was changed by someone else (%s); it was not taken back", role, te.Check)}
	}
	return err
}
