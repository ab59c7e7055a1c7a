package app

// Wiring of billing's seat check into policy (written by the billing engineer; kept in its
// own file so the rest of policy's wiring stays policy's). Every change that may add seats
// asks billing to price it before committing: turning builder rights on
// (UpdateOperatorSettings, through settings.Service.Update) and member writes (UpsertMember,
// CreateWorkspace's first admin, through settings.Service.MemberCheck). Billing answers only
// from a projection at least as fresh as policy's stream head, and refuses over the cap with
// FailedPrecondition SEAT_CAP_EXCEEDED (before / after / cap), which the gateway maps to 409.

import (
	"context"
	"flag"
	"io"

	"github.com/millwright/millwright/pkg/billingclient"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/services/policy/internal/settings"
)

// RegisterBillingFlag defines --billing-addr (env MILLWRIGHT_BILLING_ADDR).
func RegisterBillingFlag(fs *flag.FlagSet, addr *string) {
	server.StringVar(fs, addr, "billing-addr", "MILLWRIGHT_BILLING_ADDR", "127.0.0.1:50053",
		"billing's gRPC address: prices changes that add seats, builder rights on and member writes (empty: no seat check, development only)")
}

// DialBilling returns the SeatChecker backed by billing at addr, called with the service
// token, and the connection to close. An empty addr returns a nil checker (no seat check).
// The connection is lazy: policy starts even while billing is down, and a seat-adding change
// made meanwhile is refused (Unavailable) rather than let through unpriced.
func DialBilling(ctx context.Context, addr, serviceToken string) (settings.SeatChecker, io.Closer, error) {
	if addr == "" {
		return nil, io.NopCloser(nil), nil
	}
	cc, err := server.Dial(ctx, addr, serviceToken)
	if err != nil {
		return nil, nil, err
	}
	return billingclient.New(cc), cc, nil
}
