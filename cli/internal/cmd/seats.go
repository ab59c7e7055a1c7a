package cmd

import (
	"strconv"

	"github.com/spf13/cobra"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
)

func (a *app) seatsCmd() *cobra.Command {
	c := &cobra.Command{
		Use: "seats", Short: "Seat usage and the cap (billing's GetSeatUsage)", GroupID: "admin", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(a, cmd, billing, billingv1.NewBillingServiceClient, func(c billingv1.BillingServiceClient) (*billingv1.GetSeatUsageResponse, error) {
				return c.GetSeatUsage(cmd.Context(), &billingv1.GetSeatUsageRequest{})
			})
		},
	}
	capCmd := &cobra.Command{Use: "cap", Short: "The seat cap"}
	capCmd.AddCommand(&cobra.Command{
		Use: "set SEATS", Short: "SetSeatCap: at most SEATS seats (0: no cap)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return err
			}
			return call(a, cmd, billing, billingv1.NewBillingServiceClient, func(c billingv1.BillingServiceClient) (*billingv1.SetSeatCapResponse, error) {
				return c.SetSeatCap(cmd.Context(), &billingv1.SetSeatCapRequest{Seats: n})
			})
		},
	})
	price := &cobra.Command{
		Use:   "builder-price",
		Short: "What turning builder rights on in the workspace would cost, and whether the cap allows it",
		Args:  cobra.NoArgs,
		RunE: a.inWorkspace(func(cmd *cobra.Command, _ []string, ws string) error {
			return call(a, cmd, billing, billingv1.NewBillingServiceClient, func(c billingv1.BillingServiceClient) (*billingv1.CheckSeatCapForOperatorBuilderResponse, error) {
				return c.CheckSeatCapForOperatorBuilder(cmd.Context(), &billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: ws})
			})
		}),
	}
	c.AddCommand(capCmd, price, a.usageReports())
	return c
}
