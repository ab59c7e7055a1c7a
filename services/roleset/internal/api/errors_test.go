package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/services/roleset/internal/core"
)

// TestEveryCoreCodeIsMapped: each core Code has a deliberate gRPC code and reason, written down
// here. A Code added to core without a row here fails, and so does one mapped differently.
func TestEveryCoreCodeIsMapped(t *testing.T) {
	want := map[core.Code]struct {
		code   codes.Code
		reason commonv1.ErrorReason
	}{
		core.CodeInvalid:            {codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD},
		core.CodeMalformedReference: {codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE},
		core.CodeReservedName:       {codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_RESERVED_NAME},
		core.CodeNotFound:           {codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND},
		core.CodeAlreadyExists:      {codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS},
		core.CodeNoViewer:           {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_VIEWER},
		core.CodeNoRole:             {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		core.CodeRoleDisabled:       {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_DISABLED},
		core.CodeUnauthenticated:    {codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		core.CodeNotMember:          {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		core.CodeNotOurs:            {codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_NOT_OURS},
		core.CodeTampered:           {codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_TAMPERED},
	}
	require.Len(t, core.Codes(), len(want), "a core Code without a row in this table")
	for _, c := range core.Codes() {
		w, ok := want[c]
		require.True(t, ok, "core Code %d has no row in this table", c)
		err := mapError(context.Background(), &core.Error{Code: c, Msg: "m", Field: "f", Rule: "r", Kind: "k"})
		st, _ := status.FromError(err)
		assert.Equal(t, w.code, st.Code(), "core Code %d", c)
		reason, _ := errs.Reason(err)
		assert.Equal(t, w.reason, reason, "core Code %d", c)
		// CONFLICT_RETRY tells clients to retry: no refusal of the domain is transient that way.
		assert.NotEqual(t, commonv1.ErrorReason_ERROR_REASON_CONFLICT_RETRY, reason, "core Code %d", c)
	}
}

// TestUnmappedCoreCodeIsInternal: a Code the mapping does not name is an internal error (a bug
// to fix), never a PermissionDenied that reads like a decision.
func TestUnmappedCoreCodeIsInternal(t *testing.T) {
	err := mapError(context.Background(), &core.Error{Code: core.Code(999), Msg: "new refusal"})
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
}
