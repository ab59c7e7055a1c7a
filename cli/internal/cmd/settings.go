package cmd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
)

func (a *app) settingsCmd() *cobra.Command {
	c := &cobra.Command{Use: "settings", Short: "A workspace's operator settings (builder rights among them)", GroupID: "admin"}
	get := &cobra.Command{
		Use: "get", Short: "GetOperatorSettings", Args: cobra.NoArgs,
		RunE: a.inWorkspace(func(cmd *cobra.Command, _ []string, ws string) error {
			return call(a, cmd, policy, policyv1.NewSettingsServiceClient, func(c policyv1.SettingsServiceClient) (*policyv1.GetOperatorSettingsResponse, error) {
				return c.GetOperatorSettings(cmd.Context(), &policyv1.GetOperatorSettingsRequest{Workspace: ws})
			})
		}),
	}
	set := &cobra.Command{
		Use:   "set NAME=BOOL...",
		Short: "UpdateOperatorSettings: change only the settings named (e.g. builder=true)",
		Long: "UpdateOperatorSettings with a patch of the settings named, each NAME=true or NAME=false; the others\n" +
			"keep their values. Names: " + strings.Join(settingNames(), ", ") + ".",
		Args:      cobra.MinimumNArgs(1),
		ValidArgs: settingNames(),
		RunE: a.inWorkspace(func(cmd *cobra.Command, args []string, ws string) error {
			patch, err := settingsPatch(args)
			if err != nil {
				return err
			}
			return call(a, cmd, policy, policyv1.NewSettingsServiceClient, func(c policyv1.SettingsServiceClient) (*policyv1.UpdateOperatorSettingsResponse, error) {
				return c.UpdateOperatorSettings(cmd.Context(), &policyv1.UpdateOperatorSettingsRequest{Workspace: ws, Patch: patch})
			})
		}),
	}
	c.AddCommand(get, set)
	return c
}

// settingNames are the patch's fields, read from the proto so a new setting needs no CLI change.
func settingNames() []string {
	fds := (&policyv1.OperatorSettingsPatch{}).ProtoReflect().Descriptor().Fields()
	names := make([]string, fds.Len())
	for i := range names {
		names[i] = string(fds.Get(i).Name())
	}
	return names
}

// settingsPatch builds a patch from NAME=BOOL arguments.
func settingsPatch(args []string) (*policyv1.OperatorSettingsPatch, error) {
	patch := &policyv1.OperatorSettingsPatch{}
	m := patch.ProtoReflect()
	for _, arg := range args {
		name, val, ok := strings.Cut(arg, "=")
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if !ok || fd == nil {
			return nil, fmt.Errorf("%q: want NAME=true or NAME=false, NAME one of %s", arg, strings.Join(settingNames(), ", "))
		}
		b, err := strconv.ParseBool(val)
		if err != nil {
			return nil, fmt.Errorf("%q: %s is true or false", arg, name)
		}
		m.Set(fd, protoreflect.ValueOfBool(b))
	}
	return patch, nil
}
