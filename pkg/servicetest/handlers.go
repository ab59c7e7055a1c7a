package servicetest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// Handler calls one method's handler directly, with ctx (which carries the identity the
// server's authenticator would have put there).
type Handler func(t *testing.T, ctx context.Context) error

// Handlers returns, by full method name, a call of every method of descs served by srv, walked
// from the descriptors so that a new RPC is included without editing the test: a unary
// handler gets the empty request, a stream handler a stream whose one request is the empty
// message. The authorization tests give srv nil dependencies, so a handler that panics went
// past its check: the call fails t, naming it.
func Handlers(srv any, descs ...grpc.ServiceDesc) map[string]Handler {
	calls := map[string]Handler{}
	for _, sd := range descs {
		for _, md := range sd.Methods {
			calls["/"+sd.ServiceName+"/"+md.MethodName] = func(t *testing.T, ctx context.Context) error {
				return guarded(t, func() error {
					_, err := md.Handler(srv, ctx, func(any) error { return nil }, nil)
					return err
				})
			}
		}
		for _, st := range sd.Streams {
			calls["/"+sd.ServiceName+"/"+st.StreamName] = func(t *testing.T, ctx context.Context) error {
				return guarded(t, func() error { return st.Handler(srv, emptyStream{ctx}) })
			}
		}
	}
	return calls
}

func guarded(t *testing.T, call func() error) error {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("handler went past its authorization check: %v", r)
		}
	}()
	return call()
}

// emptyStream is a server stream whose one request is the empty message.
type emptyStream struct{ ctx context.Context }

func (s emptyStream) SetHeader(metadata.MD) error  { return nil }
func (s emptyStream) SendHeader(metadata.MD) error { return nil }
func (s emptyStream) SetTrailer(metadata.MD)       {}
func (s emptyStream) Context() context.Context     { return s.ctx }
func (s emptyStream) SendMsg(any) error            { return errors.New("handler sent a message") }
func (s emptyStream) RecvMsg(any) error            { return nil }

// RequireNotAllowed asserts the refusal of a token kind a method does not take:
// PermissionDenied ROLE_NOT_ALLOWED naming the kind and the kinds allowed ("superadmin,service").
func RequireNotAllowed(t *testing.T, err error, kind auth.Kind, allowed string) {
	t.Helper()
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	reason, _ := errs.Reason(err)
	require.Equal(t, commonv1.ErrorReason_ERROR_REASON_ROLE_NOT_ALLOWED, reason)
	require.Equal(t, map[string]string{"kind": kind.String(), "allowed": allowed}, errs.Infos(err)[0].GetMetadata())
}
