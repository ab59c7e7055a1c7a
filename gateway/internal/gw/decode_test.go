package gw

import (
	"errors"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/millwright/millwright/pkg/errs"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

// TestDecodeRefusalNamesTheField: a body the gateway cannot decode is refused like every other
// bad input, naming the field (in its proto name) and, for a JSON document sent as an object
// where a string is expected, the form it must take. The services' own refusals pass as they are.
func TestDecodeRefusalNamesTheField(t *testing.T) {
	m := &runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}
	for body, want := range map[string]struct{ field, says string }{
		`{"flow_json": {"value": {}}}`: {"flow_json", "must be a JSON string holding the document"},
		`{"flowJson": [1]}`:            {"flow_json", "not a JSON object or array"},
		`{"workspace": 3}`:             {"workspace", "invalid value for string field workspace"},
		`{"action": 7.5}`:              {"action", "invalid value for enum field"},
		`{"nope": 1}`:                  {"nope", `unknown field "nope"`},
		`[1]`:                          {"body", "syntax error"},
	} {
		err := m.NewDecoder(strings.NewReader(body)).Decode(&policyv1.CheckFlowRequest{})
		require.Error(t, err, body)
		got := decodeRefusal(status.Errorf(codes.InvalidArgument, "%v", err)) // as the generated handlers do
		require.Equal(t, codes.InvalidArgument, status.Code(got), body)
		infos := errs.Infos(got)
		require.Len(t, infos, 1, body)
		require.Equal(t, "ERROR_REASON_INVALID_FIELD", infos[0].GetReason())
		require.Equal(t, want.field, infos[0].GetMetadata()["field"], body)
		require.Equal(t, "json", infos[0].GetMetadata()["rule"], body)
		require.Contains(t, status.Convert(got).Message(), want.says, body)
	}
	ours := errs.InvalidField("workspace", "workspace", "workspace must be ...")
	require.Equal(t, ours, decodeRefusal(ours), "a service's refusal is kept")
	other := errors.New("not a status")
	require.Equal(t, other, decodeRefusal(other))
	denied := status.Error(codes.PermissionDenied, "no")
	require.Equal(t, denied, decodeRefusal(denied))
}
