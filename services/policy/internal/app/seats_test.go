package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/server"
)

func TestDialBillingFailsClosed(t *testing.T) {
	_, _, err := DialBilling(context.Background(), BillingConfig{}, "tok")
	require.ErrorIs(t, err, ErrNoBillingAddr, "an empty address alone must not turn pricing off")

	seats, closer, err := DialBilling(context.Background(), BillingConfig{None: true}, "tok")
	require.NoError(t, err)
	require.Nil(t, seats, "--no-billing: no seat check")
	require.NoError(t, closer.Close())

	seats, closer, err = DialBilling(context.Background(), BillingConfig{Addr: "127.0.0.1:1"}, "tok")
	require.NoError(t, err)
	require.NotNil(t, seats)
	require.NoError(t, closer.Close())
}

// Seat pricing fails closed: an empty --billing-addr without --no-billing is a usage error
// before anything starts, naming the flag that says "no billing" on purpose.
func TestServeRefusesEmptyBillingAddr(t *testing.T) {
	err := server.ServeArgs(context.Background(), new(Config),
		[]string{"--billing-addr", "", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", ""})
	var uerr *cli.UsageError
	require.ErrorAs(t, err, &uerr, "want a usage error, got %v", err)
	require.ErrorContains(t, err, "--no-billing")
	require.ErrorContains(t, err, "MILLWRIGHT_NO_BILLING=1")
}
