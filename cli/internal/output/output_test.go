package output_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/cli/internal/output"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

func TestMessage(t *testing.T) {
	enabled := true
	for _, tc := range []struct {
		name string
		msg  proto.Message
		json bool
		want string
	}{
		{name: "scalars, enums and a list of messages as a table", msg: &policyv1.CheckFlowResponse{
			Role: policyv1.Role_ROLE_OPERATOR,
			Runnables: []*policyv1.BuilderRef{
				{Kind: policyv1.RunnableKind_RUNNABLE_KIND_SCRIPT, Path: "f/a/b", Pointer: "/modules/0/value"},
				{Kind: policyv1.RunnableKind_RUNNABLE_KIND_FLOW, Path: "f/a/long_name"},
			}},
			want: "role:                  ROLE_OPERATOR\n" +
				"tags_omitted:          0\nrunnables_omitted:     0\npins_omitted:          0\ncode_findings_omitted: 0\n" +
				"runnables:\n" +
				"  KIND                  PATH           POINTER\n" +
				"  RUNNABLE_KIND_SCRIPT  f/a/b          /modules/0/value\n" +
				"  RUNNABLE_KIND_FLOW    f/a/long_name  -\n"},
		{name: "a map of one-field wrappers, sorted; empty string as -", msg: &rolesetv1.GetPermissionsResponse{
			Roles: map[string]*rolesetv1.Tenants{"b": {Tenants: []string{"g/x", "u/y"}}, "a": {Tenants: []string{"g/z"}}}},
			want: "default_role: -\nroles:        a=g/z b=g/x, u/y\n"},
		{name: "an unset optional field is left out, a set one shown", msg: &rolesetv1.UpdateRoleRequest{RoleId: "7", Enabled: &enabled},
			want: "role_id: 7\nenabled: true\n"},
		{name: "nested message and timestamp", msg: &rolesetv1.UpsertClusterResponse{Cluster: &rolesetv1.Cluster{
			ClusterId: "c", Port: 5432, CreateTime: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))}},
			want: "cluster.cluster_id:           c\ncluster.host:                 -\ncluster.port:                 5432\n" +
				"cluster.maintenance_database: -\ncluster.admin_user:           -\ncluster.create_time:          2026-01-02T03:04:05Z\n"},
		{name: "JSON: proto names, unset fields too", json: true, msg: &rolesetv1.UpdateRoleRequest{RoleId: "7"},
			want: `{"role_id":"7"}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, (&output.Printer{Out: &b, JSON: tc.json}).Message(tc.msg))
			assert.Equal(t, tc.want, b.String())
		})
	}
}

func TestTable(t *testing.T) {
	roles := []*rolesetv1.Role{{RoleId: "1", Name: "sales", Enabled: true}, {RoleId: "22", Name: "ops"}}
	for _, tc := range []struct {
		name string
		rows []*rolesetv1.Role
		json bool
		head bool
		only []string
		want string
	}{
		{name: "chosen columns", rows: roles, head: true, only: []string{"name", "enabled"},
			want: "NAME   ENABLED\nsales  true\nops    false\n"},
		{name: "an empty list names its columns", head: true, only: []string{"name", "enabled"}, want: "NAME  ENABLED\n"},
		{name: "a timestamp in one cell", rows: []*rolesetv1.Role{{CreateTime: &timestamppb.Timestamp{Seconds: 1}}}, head: true,
			only: []string{"create_time"}, want: "CREATE_TIME\n1970-01-01T00:00:01Z\n"},
		{name: "a later page has no headings", rows: roles, only: []string{"role_id", "name"},
			want: "1   sales\n22  ops\n"},
		{name: "JSON lines", rows: roles, json: true, head: true,
			want: `{"role_id":"1","cluster_id":"","name":"sales","enabled":true,"oid":0,"create_time":null}` + "\n" +
				`{"role_id":"22","cluster_id":"","name":"ops","enabled":false,"oid":0,"create_time":null}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, output.Page(&output.Printer{Out: &b, JSON: tc.json}, roles[0].ProtoReflect().Descriptor(), tc.rows, tc.head, tc.only...))
			assert.Equal(t, tc.want, b.String())
		})
	}
}

// TestTableNested: a nested message's fields are columns of their own (a list of runs).
func TestTableNested(t *testing.T) {
	runs := []*policyv1.GetRunResponse{{Run: &policyv1.RunIdentity{JobId: "j1", PermissionedAs: "u/alice"}}}
	var b bytes.Buffer
	md := runs[0].ProtoReflect().Descriptor()
	require.NoError(t, output.Page(&output.Printer{Out: &b}, md, runs, true, "run.job_id", "run.permissioned_as", "finish_time"))
	assert.Equal(t, "RUN.JOB_ID  RUN.PERMISSIONED_AS  FINISH_TIME\nj1          u/alice              -\n", b.String())
	b.Reset()
	require.NoError(t, output.Page(&output.Printer{Out: &b}, md, runs, true))
	assert.Contains(t, b.String(), "RUN.WORKSPACE  RUN.JOB_ID")
}

func TestError(t *testing.T) {
	flow := errs.WithDetails(codes.PermissionDenied, "flow refused: 2 violation(s)", []errs.Detail{
		{Reason: commonv1.ErrorReason_ERROR_REASON_INLINE_CODE, Pointer: "/modules/0/value", Message: "step has inline code", Metadata: map[string]string{"doc": "flow"}},
		{Reason: commonv1.ErrorReason_ERROR_REASON_PATH_NOT_READABLE, Pointer: "/modules/1/value", Metadata: map[string]string{"path": "f/x/y"}},
	})
	other := status.New(codes.InvalidArgument, "bad")
	other, err := other.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: "name", Reason: "pattern", Description: "name is not a name"}}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		err  error
		json bool
		want string
	}{
		{name: "every ErrorInfo: reason, then rule, field, pointer, doc, message, the rest", err: flow,
			want: "error: PermissionDenied: flow refused: 2 violation(s)\n" +
				"  reason: ERROR_REASON_INLINE_CODE\n    pointer: /modules/0/value\n    doc: flow\n    message: step has inline code\n" +
				"  reason: ERROR_REASON_PATH_NOT_READABLE\n    pointer: /modules/1/value\n    path: f/x/y\n"},
		{name: "a field error is named once, by its ErrorInfo", err: errs.InvalidField("expires_at", "required", "expires_at is required"),
			want: "error: InvalidArgument: expires_at is required\n  reason: ERROR_REASON_INVALID_FIELD\n    rule: required\n    field: expires_at\n"},
		{name: "a BadRequest alone", err: other.Err(),
			want: "error: InvalidArgument: bad\n  field: name\n    rule: pattern\n    message: name is not a name\n"},
		{name: "not a status", err: errors.New("open x: no such file"), want: "error: open x: no such file\n"},
		{name: "JSON: the status", json: true, err: errs.New(codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, "gone", nil),
			want: `{"code":5,"message":"gone","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"ERROR_REASON_NOT_FOUND","domain":"millwright","metadata":{}}]}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			output.Error(&b, tc.err, tc.json)
			assert.Equal(t, tc.want, b.String())
		})
	}
}
