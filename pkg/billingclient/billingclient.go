package billingclient

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// Checker prices changes with billing.
type Checker struct {
	client billingv1.BillingServiceClient
}

// New returns a Checker over a connection to billing (dialed with the service token).
func New(cc grpc.ClientConnInterface) *Checker {
	return &Checker{client: billingv1.NewBillingServiceClient(cc)}
}

// NewFromClient wraps an existing client (tests).
func NewFromClient(c billingv1.BillingServiceClient) *Checker { return &Checker{client: c} }

// CheckBuilderEnable returns nil when turning operator builder rights on in workspace fits
// under the seat cap, as priced by a billing projection at least as fresh as streamPos, and
// a FailedPrecondition SEAT_CAP_EXCEEDED status carrying before / after / cap otherwise.
// Billing's own errors (Unavailable PROJECTION_BEHIND, ...) are returned as they are.
func (c *Checker) CheckBuilderEnable(ctx context.Context, workspace string, streamPos int64) error {
	resp, err := c.client.CheckSeatCapForOperatorBuilder(ctx, &billingv1.CheckSeatCapForOperatorBuilderRequest{
		Workspace: workspace, MinPosition: max(streamPos, 0),
	})
	return verdict(resp, err, "turning operator builder rights on in "+workspace)
}

// MemberChange is the state of a member policy is about to write.
type MemberChange struct {
	Workspace, Username, Email string
	Role                       string // "admin", "developer" or "operator"
	Disabled, Removed          bool
}

// CheckMember is CheckBuilderEnable for a member change (a new developer, an operator
// promoted, a member re-enabled), priced by billing's CheckSeatCap: m is the member as policy
// is about to write it. The refusal is the same as builder-on's (Refusal).
func (c *Checker) CheckMember(ctx context.Context, m MemberChange, streamPos int64) error {
	resp, err := c.client.CheckSeatCap(ctx, &billingv1.CheckSeatCapRequest{
		Change: &billingv1.CheckSeatCapRequest_Member{Member: &billingv1.MemberChange{
			Workspace: m.Workspace, Username: m.Username, Email: m.Email, Role: m.Role,
			Disabled: m.Disabled, Removed: m.Removed,
		}},
		MinPosition: max(streamPos, 0),
	})
	return verdict(resp, err, fmt.Sprintf("this change to member %s of %s", m.Username, m.Workspace))
}

// price is what billing's two answers (CheckSeatCapResponse and
// CheckSeatCapForOperatorBuilderResponse) both carry.
type price interface {
	GetAllowed() bool
	GetBefore() *billingv1.SeatUsage
	GetAfter() *billingv1.SeatUsage
	GetCapSeats() int64
}

// verdict is the one reading of billing's answer for both checks: billing's error as it is,
// nil when allowed, else the Refusal, its message naming the change.
func verdict(resp price, err error, change string) error {
	if err != nil {
		return err
	}
	if resp.GetAllowed() {
		return nil
	}
	return Refusal(resp.GetBefore(), resp.GetAfter(), resp.GetCapSeats(),
		fmt.Sprintf("%s takes seat usage from %s to %s, over the cap of %d seats",
			change, resp.GetBefore().GetSeats(), resp.GetAfter().GetSeats(), resp.GetCapSeats()))
}

// Refusal is the status for a change over the cap: FailedPrecondition (HTTP 409 through the
// gateway), reason SEAT_CAP_EXCEEDED, metadata before / after / cap in decimal seats.
func Refusal(before, after *billingv1.SeatUsage, capSeats int64, msg string) error {
	return errs.New(codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED, msg,
		map[string]string{
			"before": before.GetSeats(),
			"after":  after.GetSeats(),
			"cap":    strconv.FormatInt(capSeats, 10),
		})
}
