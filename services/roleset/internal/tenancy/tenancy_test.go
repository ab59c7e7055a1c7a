package tenancy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func tenants(t *testing.T, list ...string) []Tenant {
	t.Helper()
	out, err := ParseTenants(list)
	require.NoError(t, err)
	return out
}

var alice = Identity{
	Username: "alice",
	Groups:   []string{"sales", "all"},
	Folders:  []Folder{{Name: "finance", Write: true}, {Name: "reports", Write: false}},
}

func TestTenantNames(t *testing.T) {
	cases := []struct {
		tenant string
		id     Identity
		want   bool
	}{
		{"u/alice", alice, true},
		{"u/Alice", alice, false},
		{"u/bob", alice, false},
		{"g/sales", alice, true},
		{"g/Sales", alice, false},
		{"g/eng", alice, false},
		{"f/finance", alice, true},
		{"f/reports", alice, false}, // read-only folder access does not count
		{"f/hr", alice, false},
		{"*", alice, true},
		{"*", Identity{}, false},
		{"u/alice", Identity{Groups: []string{"sales"}}, false},
		{"g/sales", Identity{Groups: []string{"sales"}}, false}, // no username, no identity
		{"*", Identity{Username: "bob", IsAdmin: true}, true},
		{"u/alice", Identity{Username: "bob", IsAdmin: true}, false}, // admin is not a tenant
	}
	for _, tc := range cases {
		t.Run(tc.tenant+"/"+tc.id.Username, func(t *testing.T) {
			tn, err := ParseTenant(tc.tenant)
			require.NoError(t, err)
			assert.Equal(t, tc.want, tn.Names(tc.id))
		})
	}
	assert.False(t, Tenant{}.Names(alice), "the zero tenant names nobody")
	assert.False(t, Tenant{Kind: TenantUser}.Names(Identity{Username: ""}))
	assert.False(t, Tenant{Kind: TenantEveryone, Name: "x"}.Names(alice), "a malformed * names nobody")
}

func names(rs []Role) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

func TestViewerRoles(t *testing.T) {
	catalog := []Role{
		{ID: "7", Name: "by_folder", Enabled: true, OID: 30, Tenants: tenants(t, "f/finance")},
		{ID: "admin", Name: "admin", Enabled: true, OID: 10, Tenants: tenants(t, "u/alice", "*")},
		{ID: "3", Name: "by_user", Enabled: true, OID: 50, Tenants: tenants(t, "u/alice")},
		{ID: "4", Name: "by_group", Enabled: true, OID: 20, Tenants: tenants(t, "g/eng", "g/sales")},
		{ID: "5", Name: "everyone", Enabled: true, OID: 40, Tenants: tenants(t, "*")},
		{ID: "6", Name: "disabled", Enabled: false, OID: 15, Tenants: tenants(t, "u/alice")},
		{ID: "8", Name: "other", Enabled: true, OID: 60, Tenants: tenants(t, "u/bob", "g/eng")},
		{ID: "9", Name: "read_folder", Enabled: true, OID: 70, Tenants: tenants(t, "f/reports")},
		{ID: "10", Name: "no_tenants", Enabled: true, OID: 80},
		{ID: "11", Name: "custom_instance_user", Enabled: true, OID: 5, Tenants: tenants(t, "*")},
		{ID: "12", Name: "ADMIN", Enabled: true, OID: 6, Tenants: tenants(t, "*")},
	}

	t.Run("matches user group folder and star sorted by oid", func(t *testing.T) {
		got, trace := ViewerRoles(catalog, alice)
		assert.Equal(t, []string{"by_group", "by_folder", "everyone", "by_user"}, names(got))
		for i := 1; i < len(got); i++ {
			assert.Less(t, got[i-1].OID, got[i].OID)
		}
		byName := map[string]TraceEntry{}
		for _, e := range trace {
			byName[e.Role] = e
		}
		require.Len(t, trace, len(catalog))
		assert.Equal(t, TraceEntry{RoleID: "4", Role: "by_group", OID: 20, Tenant: "g/sales", Matched: true, Reason: ReasonTenant, Note: byName["by_group"].Note}, byName["by_group"])
		assert.Equal(t, "f/finance", byName["by_folder"].Tenant)
		assert.Equal(t, "*", byName["everyone"].Tenant)
		assert.Equal(t, "u/alice", byName["by_user"].Tenant)
		assert.Equal(t, ReasonAdminRole, byName["admin"].Reason)
		assert.Equal(t, ReasonAdminRole, byName["ADMIN"].Reason)
		assert.Equal(t, ReasonRoleDisabled, byName["disabled"].Reason)
		assert.Equal(t, ReasonNotTenant, byName["other"].Reason)
		assert.Equal(t, ReasonNotTenant, byName["read_folder"].Reason)
		assert.Equal(t, ReasonNotTenant, byName["no_tenants"].Reason)
		assert.Equal(t, ReasonInvalidName, byName["custom_instance_user"].Reason)
		for i := 1; i < len(trace); i++ {
			assert.LessOrEqual(t, trace[i-1].OID, trace[i].OID, "trace is in oid order")
		}
	})

	t.Run("workspace admin viewer never gets admin and gains nothing", func(t *testing.T) {
		admin := Identity{Username: "root", IsAdmin: true}
		got, trace := ViewerRoles(catalog, admin)
		assert.Equal(t, []string{"everyone"}, names(got))
		for _, e := range trace {
			if e.Role == "admin" {
				assert.False(t, e.Matched)
				assert.Equal(t, ReasonAdminRole, e.Reason)
			}
		}
		// Even named explicitly in admin's tenants.
		withAdmin := alice
		withAdmin.IsAdmin = true
		got, _ = ViewerRoles(catalog, withAdmin)
		assert.NotContains(t, names(got), "admin")
		assert.NotContains(t, names(got), "ADMIN")
	})

	t.Run("viewer named by nothing gets nothing", func(t *testing.T) {
		got, _ := ViewerRoles([]Role{catalog[0], catalog[2]}, Identity{Username: "carol"})
		assert.Empty(t, got)
	})

	t.Run("no identity gets nothing even from star", func(t *testing.T) {
		got, trace := ViewerRoles(catalog, Identity{})
		assert.Empty(t, got)
		for _, e := range trace {
			assert.False(t, e.Matched)
		}
	})

	t.Run("ties on oid are ordered by id and input is not mutated", func(t *testing.T) {
		in := []Role{
			{ID: "b", Name: "rb", Enabled: true, OID: 1, Tenants: tenants(t, "*")},
			{ID: "a", Name: "ra", Enabled: true, OID: 1, Tenants: tenants(t, "*")},
		}
		got, _ := ViewerRoles(in, alice)
		assert.Equal(t, []string{"ra", "rb"}, names(got))
		assert.Equal(t, "b", in[0].ID)
	})

	t.Run("first naming tenant is traced", func(t *testing.T) {
		r := Role{ID: "1", Name: "r", Enabled: true, OID: 1, Tenants: tenants(t, "g/eng", "*", "u/alice")}
		_, trace := ViewerRoles([]Role{r}, alice)
		require.Len(t, trace, 1)
		assert.Equal(t, "*", trace[0].Tenant)
	})
}

func TestCanUseRole(t *testing.T) {
	sales := Role{ID: "1", Name: "sales", Enabled: true, OID: 100, Tenants: tenants(t, "g/sales")}
	disabledSales := sales
	disabledSales.Enabled = false
	adminRole := Role{ID: "admin", Name: "admin", Enabled: true, Tenants: tenants(t, "u/ops")}
	invalid := Role{ID: "2", Name: "pg_monitor", Enabled: true, OID: 3, Tenants: tenants(t, "*")}

	wsAdmin := Identity{Username: "root", IsAdmin: true}
	bob := Identity{Username: "bob"}
	ops := Identity{Username: "ops"}

	cases := []struct {
		name   string
		role   Role
		id     Identity
		ok     bool
		reason Reason
		tenant string
	}{
		{"tenant by group", sales, alice, true, ReasonTenant, "g/sales"},
		{"not a tenant", sales, bob, false, ReasonNotTenant, ""},
		{"workspace admin any role", sales, wsAdmin, true, ReasonWorkspaceAdmin, ""},
		{"workspace admin admin role", adminRole, wsAdmin, true, ReasonWorkspaceAdmin, ""},
		{"admin role by tenant", adminRole, ops, true, ReasonTenant, "u/ops"},
		{"admin role not tenant", adminRole, bob, false, ReasonNotTenant, ""},
		{"disabled tenant", disabledSales, alice, false, ReasonRoleDisabled, ""},
		{"disabled workspace admin", disabledSales, wsAdmin, false, ReasonRoleDisabled, ""},
		{"disabled admin role", Role{ID: "admin", Name: "admin"}, wsAdmin, false, ReasonRoleDisabled, ""},
		{"invalid catalog name", invalid, wsAdmin, false, ReasonInvalidName, ""},
		{"no identity", sales, Identity{Groups: []string{"sales"}, IsAdmin: true}, false, ReasonNoIdentity, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, trace := CanUseRole(tc.role, tc.id)
			assert.Equal(t, tc.ok, ok)
			require.Len(t, trace, 1)
			assert.Equal(t, tc.reason, trace[0].Reason)
			assert.Equal(t, tc.ok, trace[0].Matched)
			assert.Equal(t, tc.tenant, trace[0].Tenant)
			assert.Equal(t, tc.role.Name, trace[0].Role)
		})
	}
}
