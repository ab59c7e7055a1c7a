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

// fakeBilling gives one answer to both of billing's checks and records the requests.
type fakeBilling struct {
	billingv1.BillingServiceClient
	price      *billingv1.CheckSeatCapResponse // the answer; nil with err
	err        error
	builderGot *billingv1.CheckSeatCapForOperatorBuilderRequest
	memberGot  *billingv1.CheckSeatCapRequest
}

func (f *fakeBilling) CheckSeatCap(_ context.Context, in *billingv1.CheckSeatCapRequest, _ ...grpc.CallOption) (*billingv1.CheckSeatCapResponse, error) {
	f.memberGot = in
	return f.price, f.err
}

func (f *fakeBilling) CheckSeatCapForOperatorBuilder(_ context.Context, in *billingv1.CheckSeatCapForOperatorBuilderRequest, _ ...grpc.CallOption) (*billingv1.CheckSeatCapForOperatorBuilderResponse, error) {
	f.builderGot = in
	if f.price == nil {
		return nil, f.err
	}
	return &billingv1.CheckSeatCapForOperatorBuilderResponse{
		Before: f.price.GetBefore(), After: f.price.GetAfter(), CapSeats: f.price.GetCapSeats(), Allowed: f.price.GetAllowed(),
	}, f.err
}

// TestChecks: builder-on (CheckSeatCapForOperatorBuilder) and a member change (CheckSeatCap,
// with the member as policy will write it) are priced at policy's stream position, and both
// are refused alike: SEAT_CAP_EXCEEDED with before / after / cap; billing down fails closed.
func TestChecks(t *testing.T) {
	usage := func(s string) *billingv1.SeatUsage { return &billingv1.SeatUsage{Seats: s} }
	checks := []struct {
		name  string
		check func(*Checker) error
		sent  func(t *testing.T, f *fakeBilling)
	}{
		{
			name:  "builder enable",
			check: func(c *Checker) error { return c.CheckBuilderEnable(context.Background(), "ws", 17) },
			sent: func(t *testing.T, f *fakeBilling) {
				require.Equal(t, "ws", f.builderGot.GetWorkspace())
				require.Equal(t, int64(17), f.builderGot.GetMinPosition())
			},
		},
		{
			name: "member",
			check: func(c *Checker) error {
				return c.CheckMember(context.Background(),
					MemberChange{Workspace: "ws", Username: "ann", Email: "ann@x", Role: "developer"}, 17)
			},
			sent: func(t *testing.T, f *fakeBilling) {
				require.Equal(t, &billingv1.MemberChange{Workspace: "ws", Username: "ann", Email: "ann@x", Role: "developer"},
					f.memberGot.GetMember())
				require.Equal(t, int64(17), f.memberGot.GetMinPosition())
			},
		},
	}
	answers := []struct {
		name     string
		fake     fakeBilling
		wantCode codes.Code
		wantMD   map[string]string
	}{
		{name: "allowed", fake: fakeBilling{price: &billingv1.CheckSeatCapResponse{Allowed: true}}, wantCode: codes.OK},
		{
			name:     "over the cap",
			fake:     fakeBilling{price: &billingv1.CheckSeatCapResponse{Before: usage("9.5"), After: usage("11"), CapSeats: 10}},
			wantCode: codes.FailedPrecondition,
			wantMD:   map[string]string{"before": "9.5", "after": "11", "cap": "10"},
		},
		{name: "billing unavailable fails closed", fake: fakeBilling{err: status.Error(codes.Unavailable, "down")}, wantCode: codes.Unavailable},
	}
	for _, c := range checks {
		for _, a := range answers {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				fake := a.fake
				err := c.check(NewFromClient(&fake))
				require.Equal(t, a.wantCode, status.Code(err))
				c.sent(t, &fake)
				if a.wantMD != nil {
					r, ok := errs.Reason(err)
					require.True(t, ok)
					require.Equal(t, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED, r)
					require.Equal(t, a.wantMD, errs.Infos(err)[0].GetMetadata())
				}
			})
		}
	}
}
