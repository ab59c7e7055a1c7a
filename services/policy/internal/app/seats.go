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
	"errors"
	"flag"
	"io"

	"github.com/millwright/millwright/pkg/billingclient"
	"github.com/millwright/millwright/pkg/server"
	"github.com/millwright/millwright/services/policy/internal/settings"
)

// BillingConfig says where billing is, or that there is none.
type BillingConfig struct {
	Addr string
	// None runs policy without seat pricing: builder rights and member writes are never
	// priced and no seat cap is enforced. It must be said explicitly (--no-billing): an
	// empty address alone is refused, so a configuration mistake cannot turn pricing off.
	None bool
}

// RegisterBillingFlags defines --billing-addr (env MILLWRIGHT_BILLING_ADDR) and --no-billing
// (env MILLWRIGHT_NO_BILLING).
func RegisterBillingFlags(fs *flag.FlagSet, c *BillingConfig) {
	server.StringVar(fs, &c.Addr, "billing-addr", "MILLWRIGHT_BILLING_ADDR", "127.0.0.1:50053",
		"billing's gRPC address: prices changes that add seats, builder rights on and member writes")
	server.BoolVar(fs, &c.None, "no-billing", "MILLWRIGHT_NO_BILLING", false,
		"run without billing: nothing is priced and no seat cap is enforced (development, or installations without a license)")
}

// ErrNoBillingAddr refuses an empty --billing-addr without --no-billing.
var ErrNoBillingAddr = errors.New("--billing-addr is empty: builder rights and member writes would go through unpriced, past any seat cap; give billing's address, or say --no-billing (MILLWRIGHT_NO_BILLING=1) to run without seat pricing")

// DialBilling returns the SeatChecker backed by billing at c.Addr, called with the service
// token, and the connection to close; with c.None, a nil checker (no seat check). An empty
// address without c.None is ErrNoBillingAddr: pricing fails closed. The connection is lazy:
// policy starts even while billing is down, and a seat-adding change made meanwhile is
// refused (Unavailable) rather than let through unpriced.
func DialBilling(ctx context.Context, c BillingConfig, serviceToken string) (settings.SeatChecker, io.Closer, error) {
	if c.None {
		return nil, io.NopCloser(nil), nil
	}
	if c.Addr == "" {
		return nil, nil, ErrNoBillingAddr
	}
	cc, err := server.Dial(ctx, c.Addr, serviceToken)
	if err != nil {
		return nil, nil, err
	}
	return billingclient.New(cc), cc, nil
}
