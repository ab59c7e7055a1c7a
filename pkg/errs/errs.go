package errs

import (
	"errors"
	"maps"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// Domain is the ErrorInfo domain of every millwright error.
const Domain = "millwright"

// New returns a status error with code and msg carrying one ErrorInfo{reason, Domain, md}.
// msg is for humans; clients branch on the reason.
func New(code codes.Code, reason commonv1.ErrorReason, msg string, md map[string]string) error {
	return build(code, msg, errorInfo(reason, md))
}

// AlreadyExists is the one answer of every create that finds its resource taken: the
// existing resource is named in ErrorInfo metadata, kind (e.g. "role") and existing (what the
// kind's Get RPC takes: a role's id, a workspace's name), so a client that retries a create
// whose first answer it lost reads the resource back instead of listing to find it
// (docs/conventions.md, "Creates are safe to retry"). existing is "" only when the name is
// held by something millwright does not own (e.g. a cluster role not in the catalog).
func AlreadyExists(kind, existing, msg string) error {
	return New(codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS, msg,
		map[string]string{"kind": kind, "existing": existing})
}

// InvalidField is the refusal for bad input: InvalidArgument with ErrorInfo(INVALID_FIELD,
// metadata field and rule) for clients that read ErrorInfo, and a BadRequest field violation
// for generic tooling (grpc-gateway, grpcurl) that knows only the standard details.
func InvalidField(field, rule, msg string) error {
	return build(codes.InvalidArgument, msg,
		errorInfo(commonv1.ErrorReason_ERROR_REASON_INVALID_FIELD, map[string]string{"field": field, "rule": rule}),
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field: field, Description: msg, Reason: rule,
		}}})
}

// Detail is one violation among several, e.g. one offending step of a flow.
type Detail struct {
	Reason   commonv1.ErrorReason
	Pointer  string // JSON pointer to the offending element, e.g. "/value/modules/2"
	Message  string
	Metadata map[string]string
}

// WithDetails returns one status carrying an ErrorInfo per detail, so a builder sees every
// violation of a flow or app in one answer instead of fixing them one round trip at a time.
// Each ErrorInfo's metadata holds the detail's Metadata plus "pointer" and "message" (when
// set). The first detail's reason is the one Reason reports.
func WithDetails(code codes.Code, msg string, details []Detail) error {
	infos := make([]protoadapt.MessageV1, 0, len(details))
	for _, d := range details {
		md := maps.Clone(d.Metadata)
		if md == nil {
			md = map[string]string{}
		}
		if d.Pointer != "" {
			md["pointer"] = d.Pointer
		}
		if d.Message != "" {
			md["message"] = d.Message
		}
		infos = append(infos, errorInfo(d.Reason, md))
	}
	return build(code, msg, infos...)
}

// Reason returns the reason of the first ErrorInfo of domain millwright in err's status.
func Reason(err error) (commonv1.ErrorReason, bool) {
	for _, info := range Infos(err) {
		if v, ok := commonv1.ErrorReason_value[info.GetReason()]; ok {
			return commonv1.ErrorReason(v), true
		}
	}
	return commonv1.ErrorReason_ERROR_REASON_UNSPECIFIED, false
}

// Infos returns every ErrorInfo of domain millwright in err's status, in order.
func Infos(err error) []*errdetails.ErrorInfo {
	var st interface{ GRPCStatus() *status.Status }
	if err == nil || !errors.As(err, &st) {
		return nil
	}
	var out []*errdetails.ErrorInfo
	for _, d := range st.GRPCStatus().Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			out = append(out, info)
		}
	}
	return out
}

func errorInfo(reason commonv1.ErrorReason, md map[string]string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason.String(), Domain: Domain, Metadata: md}
}

func build(code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		// Only fails for code OK or an unmarshalable detail, both programming errors; the bare
		// status still carries the right code.
		return st.Err()
	}
	return withDetails.Err()
}
