package rulebook

import (
	"encoding/json"
	"errors"

	"github.com/millwright/millwright/pkg/builderflag"
)

// OperatorSettings is the resolved operator_settings of a workspace (windmill-shapes 2.1, with
// the spec's single builder flag).
type OperatorSettings struct {
	Runs, Schedules, Resources, Variables, Assets, AuditLogs, Triggers, Groups, Folders, Workers bool
	Builder                                                                                      bool
	ManageSchedules, ManageTriggers                                                              bool
	// StripBuilderSDKReadScopes drops variables:read / resources:read from builder apps'
	// frontend_sdk_scopes (the spec's accepted-risk lever). On unless withdrawn: fail closed.
	StripBuilderSDKReadScopes bool
}

// SettingKey describes one key of the stored JSON object.
type SettingKey struct {
	Key     string
	Default bool // the value of an absent key
	field   func(*OperatorSettings) *bool
}

// SettingKeys lists every key in a fixed order. The visibility keys default to true; builder
// is granted on request (absent = false); manage_* are granted unless withdrawn (absent = true).
var SettingKeys = []SettingKey{
	{"runs", true, func(s *OperatorSettings) *bool { return &s.Runs }},
	{"schedules", true, func(s *OperatorSettings) *bool { return &s.Schedules }},
	{"resources", true, func(s *OperatorSettings) *bool { return &s.Resources }},
	{"variables", true, func(s *OperatorSettings) *bool { return &s.Variables }},
	{"assets", true, func(s *OperatorSettings) *bool { return &s.Assets }},
	{"audit_logs", true, func(s *OperatorSettings) *bool { return &s.AuditLogs }},
	{"triggers", true, func(s *OperatorSettings) *bool { return &s.Triggers }},
	{"groups", true, func(s *OperatorSettings) *bool { return &s.Groups }},
	{"folders", true, func(s *OperatorSettings) *bool { return &s.Folders }},
	{"workers", true, func(s *OperatorSettings) *bool { return &s.Workers }},
	{builderflag.Key, false, func(s *OperatorSettings) *bool { return &s.Builder }},
	{"manage_schedules", true, func(s *OperatorSettings) *bool { return &s.ManageSchedules }},
	{"manage_triggers", true, func(s *OperatorSettings) *bool { return &s.ManageTriggers }},
	{"strip_builder_sdk_read_scopes", true, func(s *OperatorSettings) *bool { return &s.StripBuilderSDKReadScopes }},
}

// DefaultOperatorSettings is what a workspace with no stored keys resolves to.
func DefaultOperatorSettings() OperatorSettings {
	s, _ := ResolveOperatorSettings(nil)
	return s
}

// ResolveOperatorSettings applies defaults to a stored JSON object. A key holding anything but
// a JSON boolean resolves to its default, except builder, which is builderflag.On (the one
// definition billing and the schema share): a grant must be explicit. Unknown keys are ignored
// (the platform git-syncs the object verbatim); the schema refuses the builder-like ones.
func ResolveOperatorSettings(stored []byte) (OperatorSettings, error) {
	var raw map[string]json.RawMessage
	if len(stored) > 0 {
		if err := json.Unmarshal(stored, &raw); err != nil {
			return OperatorSettings{}, errors.New("operator_settings is not a JSON object")
		}
	}
	var s OperatorSettings
	for _, k := range SettingKeys {
		v := k.Default
		if r, ok := raw[k.Key]; ok {
			var b bool
			if json.Unmarshal(r, &b) == nil && (string(r) == "true" || string(r) == "false") {
				v = b
			}
		}
		*k.field(&s) = v
	}
	s.Builder = builderflag.On(stored)
	return s, nil
}

// SettingsPatch holds the keys an update sets; absent keys keep their stored value.
type SettingsPatch map[string]bool

// Merge returns stored with the patch applied, as the JSON object to store. Only the patch's
// keys are written, so keys the caller omitted keep their stored value (or stay absent and keep
// resolving to their default).
func Merge(stored []byte, patch SettingsPatch) ([]byte, error) {
	raw := map[string]json.RawMessage{}
	if len(stored) > 0 {
		if err := json.Unmarshal(stored, &raw); err != nil {
			return nil, errors.New("operator_settings is not a JSON object")
		}
	}
	for k, v := range patch {
		if !knownKey(k) {
			return nil, errors.New("unknown operator setting " + k)
		}
		raw[k], _ = json.Marshal(v)
	}
	return json.Marshal(raw)
}

func knownKey(k string) bool {
	for _, s := range SettingKeys {
		if s.Key == k {
			return true
		}
	}
	return false
}

// CanBuild is check_operator_can_build: admins and developers always may; an operator only
// when builder is on.
func CanBuild(role Role, s OperatorSettings) error {
	switch role {
	case RoleAdmin, RoleDeveloper:
		return nil
	case RoleOperator:
		if s.Builder {
			return nil
		}
		return ErrBuilderOff
	}
	return ErrNotMember // an unknown role never builds
}
