package cmd

import (
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// call is every unary command: connect to svc, call rpc on the generated client and print
// the answer (a refusal is rpc's error, printed by Main with its details).
func call[C any, R proto.Message](a *app, cmd *cobra.Command, svc string, client func(grpc.ClientConnInterface) C, rpc func(C) (R, error)) error {
	conn, err := a.conn(cmd.Context(), svc)
	if err != nil {
		return err
	}
	resp, err := rpc(client(conn))
	if err != nil {
		return err
	}
	return a.out.Message(resp)
}

// inWorkspace is RunE for a command about one workspace: run gets the resolved workspace,
// and the command fails with a usage error when there is none.
func (a *app) inWorkspace(run func(cmd *cobra.Command, args []string, ws string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ws, err := a.workspace()
		if err != nil {
			return err
		}
		return run(cmd, args, ws)
	}
}

// paging is the AIP-158 flags of a List command.
type paging struct {
	size  int32
	token string
	all   bool
}

func addPaging(c *cobra.Command) *paging {
	p := &paging{}
	c.Flags().Int32Var(&p.size, "page-size", 0, "items per page (0: the service's default)")
	c.Flags().StringVar(&p.token, "page-token", "", "the page to start at (printed after a page that has more)")
	c.Flags().BoolVar(&p.all, "all", false, "follow next_page_token to the last page")
	return p
}
