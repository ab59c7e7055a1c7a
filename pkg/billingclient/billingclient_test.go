package billingclient

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

type fakeBilling struct {
	billingv1.BillingServiceClient
	resp *billingv1.CheckSeatCapForOperatorBuilderResponse
	err  error
	got  *billingv1.CheckSeatCapForOperatorBuilderRequest
	// CheckSeatCap
	capResp *billingv1.CheckSeatCapResponse
	capGot  *billingv1.CheckSeatCapRequest
}

func (f *fakeBilling) CheckSeatCap(_ context.Context, in *billingv1.CheckSeatCapRequest, _ ...grpc.CallOption) (*billingv1.CheckSeatCapResponse, error) {
	f.capGot = in
	return f.capResp, f.err
}

func (f *fakeBilling) CheckSeatCapForOperatorBuilder(_ context.Context, in *billingv1.CheckSeatCapForOperatorBuilderRequest, _ ...grpc.CallOption) (*billingv1.CheckSeatCapForOperatorBuilderResponse, error) {
	f.got = in
	return f.resp, f.err
}

func TestCheckBuilderEnable(t *testing.T) {
	usage := func(s string) *billingv1.SeatUsage { return &billingv1.SeatUsage{Seats: s} }
	tests := []struct {
		name     string
		fake     *fakeBilling
		wantCode codes.Code
		wantMD   map[string]string
	}{
		{name: "allowed", fake: &fakeBilling{resp: &billingv1.CheckSeatCapForOperatorBuilderResponse{Allowed: true}}, wantCode: codes.OK},
		{
			name:     "over the cap",
			fake:     &fakeBilling{resp: &billingv1.CheckSeatCapForOperatorBuilderResponse{Before: usage("9.5"), After: usage("11"), CapSeats: 10}},
			wantCode: codes.FailedPrecondition,
			wantMD:   map[string]string{"before": "9.5", "after": "11", "cap": "10"},
		},
		{name: "billing unavailable fails closed", fake: &fakeBilling{err: status.Error(codes.Unavailable, "down")}, wantCode: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewFromClient(tt.fake).CheckBuilderEnable(context.Background(), "ws", 17)
			require.Equal(t, tt.wantCode, status.Code(err))
			require.Equal(t, "ws", tt.fake.got.GetWorkspace())
			require.Equal(t, int64(17), tt.fake.got.GetMinPosition())
			if tt.wantMD != nil {
				r, ok := errs.Reason(err)
				require.True(t, ok)
				require.Equal(t, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED, r)
				require.Equal(t, tt.wantMD, errs.Infos(err)[0].GetMetadata())
			}
		})
	}
}

// TestCheckMember: a member change is priced by CheckSeatCap with the member as policy will
// write it, at policy's stream position, and refused exactly like builder-on.
func TestCheckMember(t *testing.T) {
	usage := func(s string) *billingv1.SeatUsage { return &billingv1.SeatUsage{Seats: s} }
	tests := []struct {
		name     string
		fake     *fakeBilling
		wantCode codes.Code
		wantMD   map[string]string
	}{
		{name: "allowed", fake: &fakeBilling{capResp: &billingv1.CheckSeatCapResponse{Allowed: true}}, wantCode: codes.OK},
		{
			name:     "over the cap",
			fake:     &fakeBilling{capResp: &billingv1.CheckSeatCapResponse{Before: usage("10"), After: usage("11"), CapSeats: 10}},
			wantCode: codes.FailedPrecondition,
			wantMD:   map[string]string{"before": "10", "after": "11", "cap": "10"},
		},
		{name: "billing unavailable fails closed", fake: &fakeBilling{err: status.Error(codes.Unavailable, "down")}, wantCode: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewFromClient(tt.fake).CheckMember(context.Background(),
				MemberChange{Workspace: "ws", Username: "ann", Email: "ann@x", Role: "developer"}, 17)
			require.Equal(t, tt.wantCode, status.Code(err))
			require.Equal(t, &billingv1.MemberChange{Workspace: "ws", Username: "ann", Email: "ann@x", Role: "developer"},
				tt.fake.capGot.GetMember())
			require.Equal(t, int64(17), tt.fake.capGot.GetMinPosition())
			if tt.wantMD != nil {
				r, ok := errs.Reason(err)
				require.True(t, ok)
				require.Equal(t, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED, r)
				require.Equal(t, tt.wantMD, errs.Infos(err)[0].GetMetadata())
			}
		})
	}
}
