package api_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// TestDocumentOverTheTransportDefaultIsInvalidArgument: a 5 MiB flow, past gRPC's default 4
// MiB message limit, reaches the handler (the server accepts up to server.MaxRecvMsgSize) and
// is refused InvalidArgument VALUE_TOO_LARGE naming the field, not ResourceExhausted.
func TestDocumentOverTheTransportDefaultIsInvalidArgument(t *testing.T) {
	r := replicaWith(t, "w")
	member(t, r, "w", "op", policyv1.Role_ROLE_OPERATOR)
	setBuilder(t, r, "w", true)
	big := `{"modules":[],"pad":"` + strings.Repeat("x", 5<<20) + `"}`
	_, err := checkFlow(r, service, "w", "op", big)
	requireCode(t, err, codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_VALUE_TOO_LARGE)
}
