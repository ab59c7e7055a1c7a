package api_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/servicetest"
	"github.com/millwright/millwright/services/policy/internal/api"
)

// registrar keeps what Register registers, by service name.
type registrar map[string]any

func (r registrar) RegisterService(sd *grpc.ServiceDesc, impl any) { r[sd.ServiceName] = impl }

// methodStream puts a call's full method name in its context, as the server does.
type methodStream string

func (m methodStream) Method() string             { return string(m) }
func (methodStream) SetHeader(metadata.MD) error  { return nil }
func (methodStream) SendHeader(metadata.MD) error { return nil }
func (methodStream) SetTrailer(metadata.MD) error { return nil }

// TestEveryRPCIsServed calls the handler of every method of every policy service, as Register
// registers them (walked from the descriptors, so a new RPC is included without editing the
// test), without an identity: each must answer Unauthenticated from its own authorization
// check, before touching anything (the dependencies are nil: a handler that gets past its
// check panics). A method left to the generated Unimplemented default would answer
// Unimplemented instead.
func TestEveryRPCIsServed(t *testing.T) {
	reg := registrar{}
	api.Register(reg, api.Deps{})
	walked := 0
	for _, sd := range api.ServiceDescs {
		impl, ok := reg[sd.ServiceName]
		require.True(t, ok, "%s is not registered", sd.ServiceName)
		for method, call := range servicetest.Handlers(impl, sd) {
			walked++
			t.Run(method, func(t *testing.T) {
				ctx := grpc.NewContextWithServerTransportStream(context.Background(), methodStream(method))
				err := call(t, ctx)
				require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			})
		}
	}
	require.Len(t, reg, len(api.ServiceDescs), "every registered service is walked")
	require.Positive(t, walked)
}
