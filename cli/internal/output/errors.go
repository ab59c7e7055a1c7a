package output

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// Error writes err for a person: the gRPC code and message, then every ErrorInfo the status
// carries (reason first, then its metadata: rule, field, pointer, doc, message, ...), and the
// field violations of a BadRequest that no ErrorInfo already names. With asJSON it writes
// the google.rpc.Status as one line of protojson instead, as grpcurl -format-error does. An
// error that is not a gRPC status is written as it is.
func Error(w io.Writer, err error, asJSON bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		fmt.Fprintf(w, "error: %v\n", err)
		return
	}
	st := se.GRPCStatus()
	if asJSON {
		if JSONLine(w, st.Proto()) == nil {
			return
		}
	}
	fmt.Fprintf(w, "error: %s: %s\n", st.Code(), st.Message())
	named := map[string]bool{}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "  reason: %s\n", info.GetReason())
		keys := make([]string, 0, len(info.GetMetadata()))
		for k := range info.GetMetadata() {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(metaRank(a), metaRank(b)), cmp.Compare(a, b)) })
		for _, k := range keys {
			fmt.Fprintf(w, "    %s: %s\n", k, info.GetMetadata()[k])
		}
		named[info.GetMetadata()["field"]] = true
	}
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			if named[v.GetField()] {
				continue
			}
			fmt.Fprintf(w, "  field: %s\n    rule: %s\n    message: %s\n", v.GetField(), v.GetReason(), v.GetDescription())
		}
	}
}

// metaRank orders the metadata a reader looks for first: what rule, where, then the rest.
func metaRank(k string) int {
	switch k {
	case "rule":
		return 0
	case "field":
		return 1
	case "pointer":
		return 2
	case "doc":
		return 3
	case "message":
		return 4
	}
	return 5
}
