package errs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/server/reqctx"
)

func TestNew(t *testing.T) {
	err := errs.New(codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_NO_VIEWER, "no viewer", map[string]string{"job": "j1"})
	st := status.Convert(err)
	require.Equal(t, codes.FailedPrecondition, st.Code())
	require.Equal(t, "no viewer", st.Message())
	infos := errs.Infos(err)
	require.Len(t, infos, 1)
	assert.Equal(t, "ERROR_REASON_NO_VIEWER", infos[0].GetReason())
	assert.Equal(t, errs.Domain, infos[0].GetDomain())
	assert.Equal(t, map[string]string{"job": "j1"}, infos[0].GetMetadata())

	reason, ok := errs.Reason(fmt.Errorf("wrapped: %w", err))
	require.True(t, ok)
	assert.Equal(t, commonv1.ErrorReason_ERROR_REASON_NO_VIEWER, reason)
}

func TestAlreadyExists(t *testing.T) {
	err := errs.AlreadyExists("role", "12", "role \"sales\" exists")
	require.Equal(t, codes.AlreadyExists, status.Code(err))
	infos := errs.Infos(err)
	require.Len(t, infos, 1)
	assert.Equal(t, "ERROR_REASON_ALREADY_EXISTS", infos[0].GetReason())
	assert.Equal(t, map[string]string{"kind": "role", "existing": "12"}, infos[0].GetMetadata())
}

func TestInvalidField(t *testing.T) {
	st := status.Convert(errs.InvalidField("workspace", "required", "workspace is required"))
	require.Equal(t, codes.InvalidArgument, st.Code())
	var info *errdetails.ErrorInfo
	var br *errdetails.BadRequest
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.BadRequest:
			br = d
		}
	}
	require.NotNil(t, info)
	require.NotNil(t, br)
	assert.Equal(t, "ERROR_REASON_INVALID_FIELD", info.GetReason())
	assert.Equal(t, map[string]string{"field": "workspace", "rule": "required"}, info.GetMetadata())
	require.Len(t, br.GetFieldViolations(), 1)
	assert.Equal(t, "workspace", br.GetFieldViolations()[0].GetField())
	assert.Equal(t, "required", br.GetFieldViolations()[0].GetReason())
}

func TestWithDetails(t *testing.T) {
	err := errs.WithDetails(codes.PermissionDenied, "flow refused", []errs.Detail{
		{Reason: commonv1.ErrorReason_ERROR_REASON_INLINE_CODE, Pointer: "/value/modules/0", Message: "raw script"},
		{Reason: commonv1.ErrorReason_ERROR_REASON_HUB_PATH, Pointer: "/value/modules/3", Metadata: map[string]string{"path": "hub/1"}},
	})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	infos := errs.Infos(err)
	require.Len(t, infos, 2)
	assert.Equal(t, "ERROR_REASON_INLINE_CODE", infos[0].GetReason())
	assert.Equal(t, map[string]string{"pointer": "/value/modules/0", "message": "raw script"}, infos[0].GetMetadata())
	assert.Equal(t, map[string]string{"pointer": "/value/modules/3", "path": "hub/1"}, infos[1].GetMetadata())
	reason, ok := errs.Reason(err)
	require.True(t, ok)
	assert.Equal(t, commonv1.ErrorReason_ERROR_REASON_INLINE_CODE, reason)
}

func TestReasonOfOtherErrors(t *testing.T) {
	for name, err := range map[string]error{
		"nil":          nil,
		"plain":        errors.New("x"),
		"bare status":  status.Error(codes.Internal, "x"),
		"other domain": mustDetails(t, status.New(codes.Internal, "x"), &errdetails.ErrorInfo{Reason: "ERROR_REASON_NO_VIEWER", Domain: "other"}),
	} {
		t.Run(name, func(t *testing.T) {
			_, ok := errs.Reason(err)
			assert.False(t, ok)
		})
	}
}

func mustDetails(t *testing.T, st *status.Status, d *errdetails.ErrorInfo) error {
	st, err := st.WithDetails(d)
	require.NoError(t, err)
	return st.Err()
}

// pgErr is a realistic server error: Detail quotes row values and InternalQuery holds SQL,
// neither of which may reach the client or the log.
func pgErr(code string) error {
	return fmt.Errorf("store: insert member: %w", &pgconn.PgError{
		Severity: "ERROR", Code: code, Message: "pg message " + code,
		Detail: "Key (email)=(alice@example.com) already exists", InternalQuery: "SELECT password_hash FROM tokens",
		ConstraintName: "members_pkey",
	})
}

func TestRewriteError(t *testing.T) {
	// A real connection failure: nothing listens on port 1.
	_, connErr := pgconn.Connect(context.Background(), "postgres://u:secretpw@127.0.0.1:1/db?connect_timeout=2")
	require.Error(t, connErr)
	// A real closed pool.
	pool, err := pgxpool.New(context.Background(), "postgres://u@127.0.0.1:1/db")
	require.NoError(t, err)
	pool.Close()
	_, closedErr := pool.Acquire(context.Background())
	require.Error(t, closedErr)

	refusal := errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, "no", nil)
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason commonv1.ErrorReason
	}{
		{"status passes", refusal, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"wrapped status passes", fmt.Errorf("api: %w", refusal), codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED},
		{"canceled", fmt.Errorf("q: %w", context.Canceled), codes.Canceled, 0},
		{"deadline", fmt.Errorf("q: %w", context.DeadlineExceeded), codes.DeadlineExceeded, 0},
		{"serialization", pgErr("40001"), codes.Aborted, commonv1.ErrorReason_ERROR_REASON_CONFLICT_RETRY},
		{"deadlock", pgErr("40P01"), codes.Aborted, commonv1.ErrorReason_ERROR_REASON_CONFLICT_RETRY},
		{"query canceled", pgErr("57014"), codes.Canceled, 0},
		{"unique", pgErr("23505"), codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS},
		{"too many connections", pgErr("53300"), codes.ResourceExhausted, 0},
		{"admin shutdown", pgErr("57P01"), codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{"connection exception", pgErr("08006"), codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{"other sqlstate", pgErr("42P01"), codes.Internal, 0},
		{"pool exhausted", fmt.Errorf("%w: %w", errs.ErrPoolExhausted, context.DeadlineExceeded), codes.ResourceExhausted, 0},
		{"connect refused", connErr, codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{"closed pool", closedErr, codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{"plain bug", errors.New("SELECT password_hash FROM tokens: boom"), codes.Internal, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			ctx := reqctx.WithRequestID(context.Background(), "req-42")
			ctx = reqctx.WithLogger(ctx, slog.New(slog.NewJSONHandler(&logs, nil)))

			got := errs.RewriteError(ctx, tc.err)
			st, ok := status.FromError(got)
			require.True(t, ok, "result is a status")
			assert.Equal(t, tc.code, st.Code())
			reason, _ := errs.Reason(got)
			assert.Equal(t, tc.reason, reason)

			for _, secret := range []string{"SELECT", "password_hash", "alice@example.com", "secretpw"} {
				assert.NotContains(t, st.Message(), secret, "client message")
				if tc.name != "plain bug" { // a plain error's own text is all there is to log
					assert.NotContains(t, logs.String(), secret, "log")
				}
			}
			if tc.code == codes.Internal {
				assert.Equal(t, "internal error (request id req-42)", st.Message())
				assert.Contains(t, logs.String(), `"msg":"internal error"`)
			}
		})
	}
}

func TestRewriteErrorNilAndCallerGone(t *testing.T) {
	require.NoError(t, errs.RewriteError(context.Background(), nil))

	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	// An unclassified error after the caller's deadline is reported as the deadline.
	assert.Equal(t, codes.DeadlineExceeded, status.Code(errs.RewriteError(ctx, errors.New("read: interrupted"))))
}
