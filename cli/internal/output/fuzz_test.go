package output_test

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/millwright/millwright/cli/internal/output"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// FuzzError: a status and its details come from the server, which the CLI need not trust (a
// wrong --policy-addr may point anywhere). Whatever the bytes, Error prints one "error:" line
// first and never panics, in both forms.
func FuzzError(f *testing.F) {
	seeds := []error{
		errs.InvalidField("expires_at", "required", "expires_at is required"),
		errs.WithDetails(codes.PermissionDenied, "flow refused", []errs.Detail{
			{Reason: commonv1.ErrorReason_ERROR_REASON_INLINE_CODE, Pointer: "/modules/0/value", Metadata: map[string]string{"doc": "flow"}}}),
		status.Error(codes.Unavailable, "no answer"),
	}
	for _, err := range seeds {
		b, merr := proto.Marshal(status.Convert(err).Proto())
		if merr != nil {
			f.Fatal(merr)
		}
		f.Add(b)
	}
	odd, _ := anypb.New(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "\x00"}}})
	b, _ := proto.Marshal(&spb.Status{Code: 99, Message: "\n", Details: []*anypb.Any{odd, {TypeUrl: "x", Value: []byte{0xff}}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var st spb.Status
		if proto.Unmarshal(raw, &st) != nil || st.GetCode() == 0 {
			return // not a status, or OK (no error)
		}
		err := status.FromProto(&st).Err()
		for _, asJSON := range []bool{false, true} {
			var out bytes.Buffer
			output.Error(&out, err, asJSON)
			if !asJSON && !strings.HasPrefix(out.String(), "error: ") {
				t.Fatalf("Error printed %q", out.String())
			}
		}
	})
}
