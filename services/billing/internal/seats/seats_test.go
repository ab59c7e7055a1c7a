package seats

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAndFormatSeats(t *testing.T) {
	tests := []struct {
		in      string
		milli   int64
		out     string
		wantErr bool
	}{
		{in: "1", milli: 1000, out: "1"},
		{in: "0.5", milli: 500, out: "0.5"},
		{in: ".25", milli: 250, out: "0.25"},
		{in: "12.125", milli: 12125, out: "12.125"},
		{in: "0", milli: 0, out: "0"},
		{in: "3.", milli: 3000, out: "3"},
		{in: "0.3333", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "abc", wantErr: true},
		{in: "", wantErr: true},
		{in: "1.x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := ParseSeats(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.milli, m)
			require.Equal(t, tt.out, FormatMilli(m))
		})
	}
	require.Equal(t, "-1.5", FormatMilli(-1500))
}

func TestWeightsValidate(t *testing.T) {
	require.NoError(t, DefaultWeights.Validate())
	require.Error(t, Weights{AuthorMilli: 0, OperatorMilli: 0}.Validate())
	require.Error(t, Weights{AuthorMilli: 1000, OperatorMilli: -1}.Validate())
	require.Error(t, Weights{AuthorMilli: 500, OperatorMilli: 1000}.Validate())
	require.NoError(t, Weights{AuthorMilli: 1000, OperatorMilli: 0}.Validate())
}

func TestPriceAllowed(t *testing.T) {
	u := func(m int64) Usage { return Usage{MilliSeats: m} }
	tests := []struct {
		name string
		p    Price
		want bool
	}{
		{"no cap", Price{Before: u(5000), After: u(900000), CapSeats: 0}, true},
		{"fits under cap", Price{Before: u(5000), After: u(6000), CapSeats: 10}, true},
		{"exactly at cap", Price{Before: u(9500), After: u(10000), CapSeats: 10}, true},
		{"over cap", Price{Before: u(9500), After: u(10500), CapSeats: 10}, false},
		{"half seat over", Price{Before: u(10000), After: u(10500), CapSeats: 10}, false},
		{"zero delta at cap", Price{Before: u(10000), After: u(10000), CapSeats: 10}, true},
		{"zero delta over cap", Price{Before: u(12000), After: u(12000), CapSeats: 10}, true},
		{"frees seats over cap", Price{Before: u(12000), After: u(11000), CapSeats: 10}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.p.Allowed())
		})
	}
}

func TestMemberChangeValidate(t *testing.T) {
	ok := MemberChange{Workspace: "w", Username: "u", Email: "e@x", Role: RoleOperator}
	_, _, err := ok.Validate()
	require.NoError(t, err)
	removed := MemberChange{Workspace: "w", Username: "u", Removed: true}
	_, _, err = removed.Validate()
	require.NoError(t, err)
	for name, c := range map[string]MemberChange{
		"workspace": {Username: "u", Email: "e", Role: RoleAdmin},
		"username":  {Workspace: "w", Email: "e", Role: RoleAdmin},
		"email":     {Workspace: "w", Username: "u", Role: RoleAdmin},
		"role":      {Workspace: "w", Username: "u", Email: "e", Role: "owner"},
	} {
		t.Run(name, func(t *testing.T) {
			field, _, err := c.Validate()
			require.Error(t, err)
			require.Equal(t, name, field)
		})
	}
}
