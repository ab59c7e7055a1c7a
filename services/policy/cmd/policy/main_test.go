package main

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/cli"
)

// Seat pricing fails closed: an empty --billing-addr without --no-billing is a usage error
// before anything starts, naming the flag that says "no billing" on purpose.
func TestServeRefusesEmptyBillingAddr(t *testing.T) {
	err := serve(context.Background(), []string{"--billing-addr", "", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", ""})
	var uerr *cli.UsageError
	require.True(t, errors.As(err, &uerr), "want a usage error, got %v", err)
	require.ErrorContains(t, err, "--no-billing")
	require.ErrorContains(t, err, "MILLWRIGHT_NO_BILLING=1")
}
