package stream

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// errorDomain is the ErrorInfo domain of every millwright refusal.
const errorDomain = "millwright"

// ResyncError says the requested position is older than the retained stream: events after it
// may have been pruned, so the consumer must rebuild from a snapshot and watch from the
// snapshot's position. OldestID is the oldest after_id the stream still serves
// (stream_state.pruned_through).
type ResyncError struct{ OldestID int64 }

func (e *ResyncError) Error() string {
	return fmt.Sprintf("stream: position is older than the retained stream (oldest resumable id %d): resync from a snapshot", e.OldestID)
}

// GRPCStatus makes a Watch handler that returns the error send FAILED_PRECONDITION with
// ErrorInfo{reason ERROR_REASON_STREAM_RESYNC_REQUIRED, domain millwright, metadata oldest_id}:
// grpc-go converts any error with this method.
func (e *ResyncError) GRPCStatus() *status.Status {
	st := status.New(codes.FailedPrecondition, e.Error())
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   commonv1.ErrorReason_ERROR_REASON_STREAM_RESYNC_REQUIRED.String(),
		Domain:   errorDomain,
		Metadata: map[string]string{"oldest_id": strconv.FormatInt(e.OldestID, 10)},
	})
	if err != nil {
		return st
	}
	return withInfo
}

// AsResync reports whether err says "resync": a *ResyncError (in process) or a gRPC status
// carrying the resync ErrorInfo (on a client). OldestID is 0 if the server did not send it.
func AsResync(err error) (*ResyncError, bool) {
	if err == nil {
		return nil, false
	}
	var re *ResyncError
	if errors.As(err, &re) {
		return re, true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != errorDomain ||
			info.GetReason() != commonv1.ErrorReason_ERROR_REASON_STREAM_RESYNC_REQUIRED.String() {
			continue
		}
		oldest, _ := strconv.ParseInt(info.GetMetadata()["oldest_id"], 10, 64)
		return &ResyncError{OldestID: oldest}, true
	}
	return nil, false
}
