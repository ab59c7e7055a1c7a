package seats

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/millwright/millwright/pkg/builderflag"
)

// Event is one entry of policy's stream, transport-free.
type Event struct {
	ID        int64
	Kind      string
	Workspace string
	Key       string
	Op        string // "insert", "update" or "delete"
	Payload   string // JSON object
}

// Change is what one event does to the projection: a MemberChange, a BuilderChange, a
// WorkspaceRemoved, or nil for an event billing does not depend on (it still advances the
// position, so the event is never asked for again).
type Change any

// maxPayload bounds what the parser reads: policy's payloads are a handful of fields.
const maxPayload = 64 << 10

// flag is a grant read the way policy resolves operator_settings: only a JSON true grants;
// anything else (false, null, a string, a number from a hand-edited git-synced object) is
// false, and never an error, so a stray value cannot stall the projection.
type flag bool

func (f *flag) UnmarshalJSON(b []byte) error {
	*f = string(b) == "true"
	return nil
}

// roleField reads a role as policy's text ("operator") or as its proto enum number (3).
type roleField string

func (r *roleField) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		*r = ""
	case string:
		*r = roleField(x)
	case float64:
		names := map[float64]Role{1: RoleAdmin, 2: RoleDeveloper, 3: RoleOperator}
		n, ok := names[x]
		if !ok {
			return fmt.Errorf("unknown role number %v", x)
		}
		*r = roleField(n)
	default:
		return fmt.Errorf("role is not a string: %s", b)
	}
	return nil
}

type memberPayload struct {
	Workspace   string    `json:"workspace"`
	WorkspaceID string    `json:"workspace_id"`
	Username    string    `json:"username"`
	Email       string    `json:"email"`
	Role        roleField `json:"role"`
	IsAdmin     *flag     `json:"is_admin"`
	Operator    *flag     `json:"operator"`
	Disabled    flag      `json:"disabled"`
}

// settingsPayload is policy's settings event: the stored operator_settings object (a JSON
// object from a jsonb column, or a string holding one from a text column) and builder, the
// flag policy's schema computed from it with operator_builder_on. Billing reads only that flag,
// or, for an event without it (written before policy's migration 00006), applies the same
// definition, builderflag.On, to the object. The names the right had in earlier platform
// versions (builder_flows, builder_apps, operator_builder_enabled) grant nothing: policy never
// honoured them, and its schema now refuses them on write.
type settingsPayload struct {
	Builder          json.RawMessage `json:"builder"`
	OperatorSettings json.RawMessage `json:"operator_settings"`
}

func (p settingsPayload) on() (bool, error) {
	if p.Builder != nil {
		switch string(p.Builder) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return false, fmt.Errorf("builder is not a boolean: %s", p.Builder)
	}
	obj := []byte(p.OperatorSettings)
	var text string
	if json.Unmarshal(obj, &text) == nil {
		obj = []byte(text)
	}
	return builderflag.On(obj), nil
}

// Decode turns a stream event into a projection change. Events of kinds billing does not
// follow decode to nil. A malformed member or settings event is an error: skipping it would
// silently miscount seats, so the consumer stops and resyncs instead.
func Decode(e Event) (Change, error) {
	if len(e.Payload) > maxPayload {
		return nil, fmt.Errorf("event %d: payload too large", e.ID)
	}
	switch e.Kind {
	case "member":
		return decodeMember(e)
	case "settings", "operator_settings":
		if e.Workspace == "" && e.Key == "" {
			return nil, fmt.Errorf("event %d: settings event without workspace", e.ID)
		}
		ws := e.Workspace
		if ws == "" {
			ws = e.Key
		}
		if e.Op == "delete" {
			return BuilderChange{Workspace: ws, Builder: false}, nil
		}
		var p settingsPayload
		if err := unmarshal(e.Payload, &p); err != nil {
			return nil, fmt.Errorf("event %d: settings payload: %w", e.ID, err)
		}
		on, err := p.on()
		if err != nil {
			return nil, fmt.Errorf("event %d: settings payload: %w", e.ID, err)
		}
		return BuilderChange{Workspace: ws, Builder: on}, nil
	case "workspace":
		if e.Op != "delete" {
			return nil, nil
		}
		ws := e.Workspace
		if ws == "" {
			ws = e.Key
		}
		if ws == "" {
			return nil, fmt.Errorf("event %d: workspace delete without workspace", e.ID)
		}
		return WorkspaceRemoved{Workspace: ws}, nil
	}
	return nil, nil
}

func decodeMember(e Event) (Change, error) {
	var p memberPayload
	if err := unmarshal(e.Payload, &p); err != nil {
		return nil, fmt.Errorf("event %d: member payload: %w", e.ID, err)
	}
	c := MemberChange{Workspace: e.Workspace, Username: e.Key}
	if c.Workspace == "" {
		c.Workspace = firstNonEmpty(p.Workspace, p.WorkspaceID)
	}
	if c.Username == "" {
		c.Username = p.Username
	}
	if c.Workspace == "" || c.Username == "" {
		return nil, fmt.Errorf("event %d: member event without workspace or username", e.ID)
	}
	if e.Op == "delete" {
		c.Removed = true
		return c, nil
	}
	// The seat identity is the email exactly as policy stores it: policy admits only the one
	// canonical form (pkg/names.Email), so folding here could only merge two people policy
	// keeps apart (strings.ToLower turned U+212A KELVIN SIGN into k) and undercount seats.
	c.Email = p.Email
	if c.Email == "" {
		return nil, fmt.Errorf("event %d: member without email", e.ID)
	}
	switch {
	case p.Role != "":
		r, err := ParseRole(string(p.Role))
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", e.ID, err)
		}
		c.Role = r
	case p.IsAdmin != nil && bool(*p.IsAdmin):
		c.Role = RoleAdmin
	case p.Operator != nil && bool(*p.Operator):
		c.Role = RoleOperator
	case p.IsAdmin != nil || p.Operator != nil:
		c.Role = RoleDeveloper
	default:
		return nil, fmt.Errorf("event %d: member without role", e.ID)
	}
	c.Disabled = bool(p.Disabled)
	return c, nil
}

func unmarshal(s string, v any) error {
	if s == "" {
		s = "{}"
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return errors.New("payload is not JSON")
		}
		return err
	}
	return nil
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
