package seats

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/builderflag"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		ev      Event
		want    Change
		wantErr bool
	}{
		{
			name: "member insert",
			ev: Event{ID: 1, Kind: "member", Workspace: "w1", Key: "ann", Op: "insert",
				Payload: `{"email":"ann@example.com","role":"developer","disabled":false}`},
			want: MemberChange{Workspace: "w1", Username: "ann", Email: "ann@example.com", Role: RoleDeveloper},
		},
		{
			// Billing used to trim and lower-case: U+212A KELVIN SIGN became k, merging two
			// members policy keeps apart into one seat. The email is the identity as sent.
			name: "member email is not folded",
			ev: Event{ID: 1, Kind: "member", Workspace: "w1", Key: "kay", Op: "insert",
				Payload: `{"email":"\u212aay@x","role":"developer"}`},
			want: MemberChange{Workspace: "w1", Username: "kay", Email: "\u212aay@x", Role: RoleDeveloper},
		},
		{
			name: "member role as proto enum name and disabled",
			ev: Event{ID: 2, Kind: "member", Workspace: "w1", Key: "bob", Op: "update",
				Payload: `{"email":"bob@x","role":"ROLE_OPERATOR","disabled":true}`},
			want: MemberChange{Workspace: "w1", Username: "bob", Email: "bob@x", Role: RoleOperator, Disabled: true},
		},
		{
			name: "member role as enum number",
			ev: Event{ID: 3, Kind: "member", Workspace: "w1", Key: "c", Op: "insert",
				Payload: `{"email":"c@x","role":1}`},
			want: MemberChange{Workspace: "w1", Username: "c", Email: "c@x", Role: RoleAdmin},
		},
		{
			name: "member windmill booleans",
			ev: Event{ID: 4, Kind: "member", Workspace: "w1", Key: "d", Op: "insert",
				Payload: `{"email":"d@x","is_admin":false,"operator":true}`},
			want: MemberChange{Workspace: "w1", Username: "d", Email: "d@x", Role: RoleOperator},
		},
		{
			name: "member delete",
			ev:   Event{ID: 5, Kind: "member", Workspace: "w1", Key: "d", Op: "delete", Payload: `{"email":"d@x"}`},
			want: MemberChange{Workspace: "w1", Username: "d", Removed: true},
		},
		{
			name: "member workspace from payload",
			ev: Event{ID: 6, Kind: "member", Key: "e", Op: "insert",
				Payload: `{"workspace_id":"w9","email":"e@x","role":"admin"}`},
			want: MemberChange{Workspace: "w9", Username: "e", Email: "e@x", Role: RoleAdmin},
		},
		{name: "member without role", ev: Event{ID: 7, Kind: "member", Workspace: "w", Key: "f", Op: "insert", Payload: `{"email":"f@x"}`}, wantErr: true},
		{name: "member unknown role", ev: Event{ID: 8, Kind: "member", Workspace: "w", Key: "f", Op: "insert", Payload: `{"email":"f@x","role":"owner"}`}, wantErr: true},
		{name: "member without email", ev: Event{ID: 9, Kind: "member", Workspace: "w", Key: "f", Op: "insert", Payload: `{"role":"admin"}`}, wantErr: true},
		{name: "member not json", ev: Event{ID: 10, Kind: "member", Workspace: "w", Key: "f", Op: "insert", Payload: `{`}, wantErr: true},
		{name: "member without key", ev: Event{ID: 11, Kind: "member", Workspace: "w", Op: "insert", Payload: `{"email":"a","role":"admin"}`}, wantErr: true},
		{
			name: "settings nested object",
			ev: Event{ID: 12, Kind: "settings", Workspace: "w1", Key: "w1", Op: "update",
				Payload: `{"operator_settings":{"runs":true,"builder":true}}`},
			want: BuilderChange{Workspace: "w1", Builder: true},
		},
		{
			name: "settings nested as text",
			ev: Event{ID: 13, Kind: "settings", Workspace: "w1", Op: "update",
				Payload: `{"operator_settings":"{\"builder\":true}"}`},
			want: BuilderChange{Workspace: "w1", Builder: true},
		},
		{
			// Policy never granted builder rights by these names: counting them charged
			// operators as authors whom policy still refused.
			name: "settings legacy names grant nothing",
			ev: Event{ID: 14, Kind: "settings", Workspace: "w1", Op: "update",
				Payload: `{"builder_flows":true,"builder_apps":true,"operator_builder_enabled":true,"operator_settings":{"builder_apps":true}}`},
			want: BuilderChange{Workspace: "w1", Builder: false},
		},
		{
			name: "settings computed flag wins over the object",
			ev: Event{ID: 14, Kind: "settings", Workspace: "w1", Op: "update",
				Payload: `{"builder":false,"operator_settings":{"builder":true}}`},
			want: BuilderChange{Workspace: "w1", Builder: false},
		},
		{name: "settings computed flag not a boolean", ev: Event{ID: 14, Kind: "settings", Workspace: "w1", Op: "update",
			Payload: `{"builder":"true"}`}, wantErr: true},
		{
			name: "settings builder off",
			ev:   Event{ID: 15, Kind: "settings", Workspace: "w1", Op: "update", Payload: `{"builder":false}`},
			want: BuilderChange{Workspace: "w1", Builder: false},
		},
		{
			name: "settings non-boolean grant grants nothing",
			ev:   Event{ID: 16, Kind: "settings", Workspace: "w1", Op: "update", Payload: `{"operator_settings":{"builder":"true","builder_apps":1}}`},
			want: BuilderChange{Workspace: "w1", Builder: false},
		},
		{
			name: "settings delete",
			ev:   Event{ID: 17, Kind: "settings", Workspace: "w1", Op: "delete"},
			want: BuilderChange{Workspace: "w1", Builder: false},
		},
		{
			name: "workspace delete",
			ev:   Event{ID: 18, Kind: "workspace", Key: "w1", Op: "delete"},
			want: WorkspaceRemoved{Workspace: "w1"},
		},
		{name: "workspace insert ignored", ev: Event{ID: 19, Kind: "workspace", Key: "w1", Op: "insert"}, want: nil},
		{name: "other kind ignored", ev: Event{ID: 20, Kind: "token", Key: "t", Op: "insert", Payload: `not json`}, want: nil},
		{name: "settings without workspace", ev: Event{ID: 21, Kind: "settings", Op: "update", Payload: `{}`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.ev)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// FuzzDecode: stream payloads come from another service; decoding must never panic, and a
// decoded member change is always one the store accepts.
func FuzzDecode(f *testing.F) {
	f.Add("member", "w", "u", "insert", `{"email":"a@b","role":"operator","disabled":true}`)
	f.Add("settings", "w", "w", "update", `{"operator_settings":{"builder":true}}`)
	f.Add("member", "", "", "delete", `{}`)
	f.Add("workspace", "w", "w", "delete", ``)
	f.Fuzz(func(t *testing.T, kind, ws, key, op, payload string) {
		c, err := Decode(Event{ID: 1, Kind: kind, Workspace: ws, Key: key, Op: op, Payload: payload})
		if err != nil {
			return
		}
		if m, ok := c.(MemberChange); ok {
			if _, _, verr := m.Validate(); verr != nil {
				t.Fatalf("decoded an invalid member change %+v: %v", m, verr)
			}
		}
	})
}

// Billing prices builder rights by the one definition: every example of pkg/builderflag
// decodes to the same flag whether the event carries policy's computed flag (as policy's schema
// writes it, checked by policy's TestBuilderDefinitionAgrees) or only the object.
func TestDecodeBuilderDefinition(t *testing.T) {
	for _, ex := range builderflag.Examples {
		t.Run(ex.Settings, func(t *testing.T) {
			computed := fmt.Sprintf(`{"operator_settings":%s,"builder":%t}`, ex.Settings, ex.On)
			for _, payload := range []string{computed, `{"operator_settings":` + ex.Settings + `}`} {
				got, err := Decode(Event{ID: 1, Kind: "settings", Workspace: "w", Op: "update", Payload: payload})
				require.NoError(t, err)
				require.Equal(t, BuilderChange{Workspace: "w", Builder: ex.On}, got, payload)
			}
		})
	}
}
