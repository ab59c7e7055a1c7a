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
	"github.com/millwright/millwright/services/roleset/internal/engine"
)

// TestEveryCoreCodeIsMapped: each core Code has a deliberate gRPC code and reason, written down
// here. A Code added to core without a row here fails, and so does one mapped differently.
func TestEveryCoreCodeIsMapped(t *testing.T) {
	want := map[engine.Code]struct {
		code   codes.Code
		reason commonv1.ErrorReason
	}{
		engine.CodeInvalid:            {codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD},
		engine.CodeMalformedReference: {codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE},
		engine.CodeReservedName:       {codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_RESERVED_NAME},
		engine.CodeNotFound:           {codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND},
		engine.CodeAlreadyExists:      {codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS},
		engine.CodeNoViewer:           {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_VIEWER},
		engine.CodeNoRole:             {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		engine.CodeRoleDisabled:       {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_DISABLED},
		engine.CodeUnauthenticated:    {codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED},
		engine.CodeNotMember:          {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_ROLE},
		engine.CodeNotOurs:            {codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_NOT_OURS},
		engine.CodeTampered:           {codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_CLUSTER_ROLE_TAMPERED},
		engine.CodeViewerAccessOff:    {codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_VIEWER_ACCESS_OFF},
		engine.CodeProxyOff:           {codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_PROXY_NOT_CONFIGURED},
	}
	require.Len(t, engine.Codes(), len(want), "a core Code without a row in this table")
	for _, c := range engine.Codes() {
		w, ok := want[c]
		require.True(t, ok, "core Code %d has no row in this table", c)
		err := mapError(context.Background(), &engine.Error{Code: c, Msg: "m", Field: "f", Rule: "r", Kind: "k"})
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
	err := mapError(context.Background(), &engine.Error{Code: engine.Code(999), Msg: "new refusal"})
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
}
