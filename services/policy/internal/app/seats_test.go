package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
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
