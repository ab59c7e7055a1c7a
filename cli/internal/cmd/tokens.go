package cmd

import (
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

func (a *app) tokensCmd() *cobra.Command {
	c := &cobra.Command{Use: "tokens", Short: "Create, revoke and read back user tokens (policy's TokenService)", GroupID: "admin"}
	var (
		username, label string
		scopes          []string
		expires         time.Duration
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "CreateToken for --username: the token is printed once, here, and never again",
		Args:  cobra.NoArgs,
		RunE: a.inWorkspace(func(cmd *cobra.Command, _ []string, ws string) error {
			req := &policyv1.CreateTokenRequest{Workspace: ws, Username: username, Scopes: scopes, Label: label}
			if expires > 0 {
				req.ExpiresAt = timestamppb.New(time.Now().Add(expires))
			}
			return call(a, cmd, policy, policyv1.NewTokenServiceClient, func(c policyv1.TokenServiceClient) (*policyv1.CreateTokenResponse, error) {
				return c.CreateToken(cmd.Context(), req)
			})
		}),
	}
	create.Flags().StringVar(&username, "username", "", "the user the token acts as")
	create.Flags().StringSliceVar(&scopes, "scope", nil, "a scope (repeatable; none: every scope of the user)")
	create.Flags().StringVar(&label, "label", "", "a label to recognise the token by")
	create.Flags().DurationVar(&expires, "expires-in", 24*time.Hour, "lifetime (at most 366 days, and not past the expiry of the token that creates it)")
	revoke := &cobra.Command{
		Use: "revoke TOKEN_ID", Short: "RevokeToken: by its id (never the token itself)", Args: cobra.ExactArgs(1),
		RunE: a.inWorkspace(func(cmd *cobra.Command, args []string, ws string) error {
			return call(a, cmd, policy, policyv1.NewTokenServiceClient, func(c policyv1.TokenServiceClient) (*policyv1.RevokeTokenResponse, error) {
				return c.RevokeToken(cmd.Context(), &policyv1.RevokeTokenRequest{Workspace: ws, TokenId: args[0]})
			})
		}),
	}
	c.AddCommand(create, revoke)
	c.AddCommand(a.tokenReadBack()...)
	return c
}
