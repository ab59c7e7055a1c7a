package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

func (a *app) checkCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "check",
		Short:   "Ask policy whether a flow, app or preview may be saved (exit 0 allowed, 1 refused, 2 error)",
		GroupID: "builder",
		Long: `Ask policy's BuilderService what it asks on every save: may the caller (or --on-behalf-of)
compose this flow or app, or preview this script? Allowed prints what it composes; refused
prints every refusal with its reason, rule and JSON pointer.

Exit codes: 0 allowed, 1 refused, 2 usage or transport error (nothing was decided), so that a
git hook or a CI step can run it before a sync:

  millwright check flow flow.json || exit 1`,
	}
	var onBehalfOf string
	c.PersistentFlags().StringVar(&onBehalfOf, "on-behalf-of", "", "check for this owner (u/<user> or g/<group>) instead of the caller")

	var action string
	flow := &cobra.Command{
		Use: "flow FILE", Short: "CheckFlow: a flow's JSON from FILE (- for standard input)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			act, ok := policyv1.FlowAction_value["FLOW_ACTION_"+strings.ToUpper(action)]
			if !ok {
				return fmt.Errorf("--action %q: one of save, draft, preview, dependencies", action)
			}
			return a.builderCall(cmd, args[0], func(ws string, doc []byte, bc policyv1.BuilderServiceClient) (proto.Message, error) {
				return bc.CheckFlow(cmd.Context(), &policyv1.CheckFlowRequest{
					Workspace: ws, OnBehalfOf: onBehalfOf, Action: policyv1.FlowAction(act), FlowJson: string(doc)})
			})
		},
	}
	flow.Flags().StringVar(&action, "action", "save", "what the platform is about to do: save, draft, preview or dependencies")

	var policyFile, deployPath string
	var scopes []string
	app := &cobra.Command{
		Use: "app FILE", Short: "CheckApp: an app's value JSON from FILE (- for standard input)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dp, ok := policyv1.DeployPath_value["DEPLOY_PATH_"+strings.ToUpper(deployPath)]
			if deployPath == "" {
				dp, ok = 0, true
			}
			if !ok {
				return fmt.Errorf("--deploy-path %q: one of value, multipart, source", deployPath)
			}
			var pol []byte
			if policyFile != "" {
				var err error
				if pol, err = a.readInput(policyFile); err != nil {
					return err
				}
			}
			return a.builderCall(cmd, args[0], func(ws string, doc []byte, bc policyv1.BuilderServiceClient) (proto.Message, error) {
				return bc.CheckApp(cmd.Context(), &policyv1.CheckAppRequest{
					Workspace: ws, OnBehalfOf: onBehalfOf, AppValueJson: string(doc), PolicyJson: string(pol),
					DeployPath: policyv1.DeployPath(dp), CallerScopes: scopes})
			})
		},
	}
	app.Flags().StringVar(&policyFile, "policy", "", "the app's policy JSON from this file")
	app.Flags().StringVar(&deployPath, "deploy-path", "", "value, multipart or source (default: the service's)")
	app.Flags().StringSliceVar(&scopes, "caller-scope", nil, "a scope of the caller's token (repeatable)")

	var path string
	preview := &cobra.Command{
		Use:   "preview [FILE]",
		Short: "CheckPreview: raw code from FILE (- for standard input), or --path of an existing script",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (path == "") == (len(args) == 0) {
				return fmt.Errorf("give either FILE (raw code) or --path")
			}
			req := &policyv1.CheckPreviewRequest{OnBehalfOf: onBehalfOf}
			file := ""
			if path != "" {
				req.Target = &policyv1.CheckPreviewRequest_Path{Path: path}
			} else {
				file = args[0]
			}
			return a.builderCall(cmd, file, func(ws string, doc []byte, bc policyv1.BuilderServiceClient) (proto.Message, error) {
				req.Workspace = ws
				if file != "" {
					req.Target = &policyv1.CheckPreviewRequest_RawCode{RawCode: string(doc)}
				}
				return bc.CheckPreview(cmd.Context(), req)
			})
		},
	}
	preview.Flags().StringVar(&path, "path", "", "the path of an existing script to preview")
	c.AddCommand(flow, app, preview)
	return c
}

// builderCall is every check: read file (none when ""), call policy's BuilderService in the
// resolved workspace and print what is allowed; a refusal comes back as the call's error.
func (a *app) builderCall(cmd *cobra.Command, file string, check func(ws string, doc []byte, bc policyv1.BuilderServiceClient) (proto.Message, error)) error {
	var doc []byte
	if file != "" {
		var err error
		if doc, err = a.readInput(file); err != nil {
			return err
		}
	}
	ws, err := a.workspace()
	if err != nil {
		return err
	}
	return call(a, cmd, policy, policyv1.NewBuilderServiceClient, func(bc policyv1.BuilderServiceClient) (proto.Message, error) {
		return check(ws, doc, bc)
	})
}
