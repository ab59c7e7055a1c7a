package cmd

import (
	"github.com/spf13/cobra"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

func (a *app) explainCmd() *cobra.Command {
	var datatable, role string
	c := &cobra.Command{
		Use:     "explain [REFERENCE]",
		Short:   "Why a run's viewer gets these roles: roleset's tenancy trace, with a job token",
		GroupID: "builder",
		Long: `Ask roleset's ConnectionService/ExplainConnection what ResolveConnection would decide for this
job token (the run's recorded viewer) and why: the subject, the login, the roles, and the
trace of every role's tenants, matched or not. Nothing is resolved and no ticket is issued.

  MILLWRIGHT_TOKEN=$JOB_TOKEN millwright explain 'datatable://main?as=viewer'

It exits 0 whether the connection would be allowed or not: the answer is the explanation.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &rolesetv1.ExplainConnectionRequest{Datatable: datatable, Role: role}
			if len(args) == 1 {
				req.Reference = args[0]
			}
			return call(a, cmd, roleset, rolesetv1.NewConnectionServiceClient, func(c rolesetv1.ConnectionServiceClient) (*rolesetv1.ExplainConnectionResponse, error) {
				return c.ExplainConnection(cmd.Context(), req)
			})
		},
	}
	c.Flags().StringVar(&datatable, "datatable", "", "the data table, instead of a reference")
	c.Flags().StringVar(&role, "role", "", "the role asked for, instead of a reference")
	return c
}
