package builderflag

import "encoding/json"

// Key is the one operator_settings key that grants builder rights.
const Key = "builder"

// On reports whether the operator_settings object settings grants builder rights: its member
// Key is the JSON literal true. A document that is not a JSON object grants nothing. As in
// PostgreSQL's jsonb, the last of duplicate members wins.
func On(settings []byte) bool {
	var raw map[string]json.RawMessage
	if json.Unmarshal(settings, &raw) != nil {
		return false
	}
	return string(raw[Key]) == "true"
}

// Example is one stored operator_settings object and whether it grants builder rights.
type Example struct {
	Settings string
	On       bool
}

// Examples is the agreement corpus: policy's test runs it through On and through the SQL
// function operator_builder_on, billing's through its event decoder, so the three cannot drift
// apart unnoticed.
var Examples = []Example{
	{`{"builder": true}`, true},
	{`{"runs": false, "builder": true}`, true},
	{`{"builder": false, "builder": true}`, true}, // the last duplicate wins, as in jsonb
	{`{"builder": true, "builder": false}`, false},
	{`{}`, false},
	{`{"builder": false}`, false},
	{`{"builder": "true"}`, false},
	{`{"builder": 1}`, false},
	{`{"builder": null}`, false},
	{`{"builder": [true]}`, false},
	{`{"builder": {"on": true}}`, false},
	{`{"Builder": true}`, false},
	{`{"BUILDER": true}`, false},
	{`{"builder_apps": true}`, false},
	{`{"builder_flows": true}`, false},
	{`{"operator_builder_enabled": true}`, false},
	{`{"builder_flows": true, "builder_apps": true, "operator_builder_enabled": true}`, false},
	{`{"strip_builder_sdk_read_scopes": true}`, false},
	{`{"nested": {"builder": true}}`, false},
	{`{"builder ": true}`, false},
	{`{"bu\u0131lder": true}`, false}, // dotless i
}
