package tenancy

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTenant(t *testing.T) {
	cases := []struct {
		in   string
		want Tenant
		rule string
		pos  int
	}{
		{"u/alice", Tenant{TenantUser, "alice"}, "", 0},
		{"u/Alice_2", Tenant{TenantUser, "Alice_2"}, "", 0},
		{"g/analysts", Tenant{TenantGroup, "analysts"}, "", 0},
		{"g/sales-emea.eu", Tenant{TenantGroup, "sales-emea.eu"}, "", 0},
		{"g/all", Tenant{TenantGroup, "all"}, "", 0},
		{"f/finance", Tenant{TenantFolder, "finance"}, "", 0},
		{"f/2024_reports", Tenant{TenantFolder, "2024_reports"}, "", 0},
		{"*", Tenant{Kind: TenantEveryone}, "", 0},
		{"u/" + strings.Repeat("a", 50), Tenant{TenantUser, strings.Repeat("a", 50)}, "", 0},

		{"", Tenant{}, RuleTenantEmpty, 0},
		{"u/", Tenant{}, RuleTenantEmpty, 2},
		{"g/", Tenant{}, RuleTenantEmpty, 2},
		{"f/", Tenant{}, RuleTenantEmpty, 2},
		{"**", Tenant{}, RuleTenantKind, 0},
		{"* ", Tenant{}, RuleTenantKind, 0},
		{" *", Tenant{}, RuleTenantKind, 0},
		{"*/x", Tenant{}, RuleTenantKind, 0},
		{"U/alice", Tenant{}, RuleTenantKind, 0},
		{"G/x", Tenant{}, RuleTenantKind, 0},
		{"x/alice", Tenant{}, RuleTenantKind, 0},
		{"alice", Tenant{}, RuleTenantKind, 0},
		{"u", Tenant{}, RuleTenantKind, 0},
		{"/alice", Tenant{}, RuleTenantKind, 0},
		{"u:alice", Tenant{}, RuleTenantKind, 0},
		{" u/alice", Tenant{}, RuleTenantKind, 0},
		{"u/alice ", Tenant{}, RuleTenantCharset, 7},
		{"u/al ice", Tenant{}, RuleTenantCharset, 4},
		{"u/alice\n", Tenant{}, RuleTenantCharset, 7},
		{"u/a/b", Tenant{}, RuleTenantCharset, 3},
		{"u//alice", Tenant{}, RuleTenantCharset, 2},
		{"g/a/b", Tenant{}, RuleTenantCharset, 3},
		{"f/a/b", Tenant{}, RuleTenantCharset, 3},
		{"u/1alice", Tenant{}, RuleTenantCharset, 2},
		{"u/_alice", Tenant{}, RuleTenantCharset, 2},
		{"u/alice-b", Tenant{}, RuleTenantCharset, 7},
		{"u/alice@example.com", Tenant{}, RuleTenantCharset, 7},
		{"u/*", Tenant{}, RuleTenantCharset, 2},
		{"f/fin-ance", Tenant{}, RuleTenantCharset, 5},
		{"f/fin.ance", Tenant{}, RuleTenantCharset, 5},
		{"g/sales emea", Tenant{}, RuleTenantCharset, 7},
		{"g/ålborg", Tenant{}, RuleTenantCharset, 2},
		{"u/" + strings.Repeat("a", 51), Tenant{}, RuleTenantLength, 52},
		{"g/" + strings.Repeat("a", 256), Tenant{}, RuleTenantLength, 257},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTenant(tc.in)
			if tc.rule == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				assert.Equal(t, tc.in, got.String())
				return
			}
			var te *TenantError
			require.ErrorAs(t, err, &te)
			assert.Equal(t, tc.rule, te.Rule)
			assert.Equal(t, tc.pos, te.Pos)
			assert.Equal(t, Tenant{}, got)
		})
	}
}

func TestParseTenants(t *testing.T) {
	got, err := ParseTenants([]string{"u/alice", "g/sales", "u/alice", "*"})
	require.NoError(t, err)
	assert.Equal(t, []Tenant{{TenantUser, "alice"}, {TenantGroup, "sales"}, {Kind: TenantEveryone}}, got)

	_, err = ParseTenants([]string{"u/alice", "u/bad name"})
	var te *TenantError
	require.ErrorAs(t, err, &te)
	assert.Contains(t, err.Error(), "tenants[1]")
}

func FuzzParseTenant(f *testing.F) {
	for _, s := range []string{"u/alice", "g/a.b-c", "f/x", "*", "", "u/", "u/a/b", "U/x", "u/al ice", "**"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tn, err := ParseTenant(s)
		if err != nil {
			var te *TenantError
			if !errors.As(err, &te) || te.Rule == "" {
				t.Fatalf("bad error %v", err)
			}
			if tn != (Tenant{}) {
				t.Fatalf("non-zero tenant with error")
			}
			return
		}
		if tn.String() != s {
			t.Fatalf("String() = %q, want the input %q", tn.String(), s)
		}
		again, err := ParseTenant(tn.String())
		if err != nil || again != tn {
			t.Fatalf("round trip %+v -> %+v, %v", tn, again, err)
		}
		if strings.ContainsAny(tn.Name, "/ \t\r\n*") || (tn.Kind != TenantEveryone && tn.Name == "") {
			t.Fatalf("accepted name %q", tn.Name)
		}
	})
}
