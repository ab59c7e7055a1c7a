package engine

import (
	"context"
	"errors"

	"github.com/millwright/millwright/services/roleset/internal/tenancy"
)

// Run is a run's recorded identity, as policy returns it for a job token.
type Run struct {
	Workspace      string
	JobID          string
	PermissionedAs string // "u/<username>" or "g/<group>"
	Origin         string
	HasViewer      bool
	ViewerEmail    string
}

// Identity is what the engine needs from policy. The gRPC implementation lives in package
// policyidentity; a fake exists only for pure unit tests.
type Identity interface {
	// RunIdentity authenticates a job token and returns its run. ErrUnauthenticated for an
	// unknown, finished or revoked token; any other error is a failure to decide.
	RunIdentity(ctx context.Context, jobToken string) (Run, error)
	// Tenancy resolves an email in a workspace. ErrNotMember for a non-member or a disabled
	// member.
	Tenancy(ctx context.Context, workspace, email string) (tenancy.Identity, error)
	// OwnerTenancy resolves the run's permissioned_as user. ErrNotMember when it names no
	// enabled member (a group owner is refused: it names no user).
	OwnerTenancy(ctx context.Context, run Run) (tenancy.Identity, error)
}

// Errors an Identity returns.
var (
	ErrUnauthenticated = errors.New("job token refused")
	ErrNotMember       = errors.New("not an enabled member of the workspace")
)
