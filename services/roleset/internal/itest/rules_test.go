package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// rulesFile holds the connection rules as data; its "about" says what every field means.
const rulesFile = "testdata/rules.json"

type rules struct {
	About string `json:"about"`
	Setup struct {
		Roles []struct {
			Name    string `json:"name"`
			Enabled bool   `json:"enabled"`
		} `json:"roles"`
		Permissions map[string]struct {
			DefaultRole string              `json:"default_role"`
			Tenants     map[string][]string `json:"tenants"`
		} `json:"permissions"`
		Datatables []struct {
			Name         string `json:"name"`
			DefaultRole  string `json:"default_role"`
			ViewerAccess *bool  `json:"viewer_access"`
		} `json:"datatables"`
	} `json:"setup"`
	Runs             map[string]ruleRun `json:"runs"`
	Cases            []ruleCase         `json:"cases"`
	RefusedRoleNames []string           `json:"refused_role_names"`
}

// ruleRun is a job token: a run recorded in the policy stand-in, or a literal token.
type ruleRun struct {
	Owner  string `json:"owner"`
	Origin string `json:"origin"`
	Viewer string `json:"viewer"`
	Token  string `json:"token"`
}

type ruleCase struct {
	Name      string `json:"name"`
	Run       string `json:"run"`
	Reference string `json:"reference"`
	Datatable string `json:"datatable"`
	Role      string `json:"role"`
	Want      struct {
		Code   string   `json:"code"`
		Reason string   `json:"reason"`
		Kind   string   `json:"kind"`
		Sees   []string `json:"sees"`
	} `json:"want"`
}

// loadRules reads the rules, refusing unknown fields and trailing data (a misspelt expectation
// would otherwise be dropped), and checks that every case names a known run.
func loadRules(t *testing.T) rules {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r rules
	require.NoError(t, dec.Decode(&r), rulesFile)
	_, err = dec.Token()
	require.ErrorIs(t, err, io.EOF, "%s: data after the top-level value", rulesFile)
	names := map[string]bool{}
	for _, c := range r.Cases {
		require.False(t, names[c.Name], "two cases named %q", c.Name)
		names[c.Name] = true
		require.Contains(t, r.Runs, c.Run, "case %q", c.Name)
		require.NotEmpty(t, c.Want.Code, "case %q", c.Name)
	}
	return r
}

// TestRules replays testdata/rules.json: every refusal is checked for its code and reason;
// every success logs in with the credential handed out and looks at the rows it sees.
func TestRules(t *testing.T) {
	rs := loadRules(t)
	f := newFixture(t, 1)
	// The real name of every role the file names.
	realName := map[string]string{"emea": f.emea.GetName(), "apac": f.apac.GetName(), "amer": f.amer.GetName()}
	ids := map[string]string{"emea": f.emea.GetRoleId(), "apac": f.apac.GetRoleId(), "amer": f.amer.GetRoleId(), "admin": "admin"}
	for _, r := range rs.Setup.Roles {
		role := f.createRole(f.r, r.Name+"_"+randHex(3))
		realName[r.Name], ids[r.Name] = role.GetName(), role.GetRoleId()
		if !r.Enabled {
			_, err := f.r.roles().UpdateRole(adminCtx(), &rolesetv1.UpdateRoleRequest{RoleId: role.GetRoleId(), Enabled: new(false)})
			require.NoError(t, err)
		}
	}
	id := func(name string) string {
		if v, ok := ids[name]; ok {
			return v
		}
		return name // $none
	}
	for _, d := range rs.Setup.Datatables {
		_, err := f.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: d.Name,
			ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass, DefaultRole: id(d.DefaultRole),
			ViewerAccess: d.ViewerAccess})
		require.NoError(t, err)
	}
	for dt, p := range rs.Setup.Permissions {
		roles := map[string]*rolesetv1.Tenants{}
		for name, tenants := range p.Tenants {
			roles[id(name)] = &rolesetv1.Tenants{Tenants: tenants}
		}
		_, err := f.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "ws", Name: dt,
			DefaultRole: id(p.DefaultRole), Roles: roles})
		require.NoError(t, err)
	}
	// {name} stands for a setup role's real name.
	var pairs []string
	for name, r := range realName {
		pairs = append(pairs, "{"+name+"}", r)
	}
	realNames := strings.NewReplacer(pairs...)
	tokens := map[string]string{}
	for name, r := range rs.Runs {
		tokens[name] = r.Token
		if r.Token == "" {
			origin, ok := policyv1.RunOrigin_value[r.Origin]
			require.True(t, ok, "run %q: origin %q", name, r.Origin)
			tokens[name] = f.policy.run(r.Owner, policyv1.RunOrigin(origin), r.Viewer)
		}
	}

	for _, tc := range rs.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			req := &rolesetv1.ResolveConnectionRequest{Reference: realNames.Replace(tc.Reference),
				Datatable: tc.Datatable, Role: realNames.Replace(tc.Role)}
			c, err := f.r.conns().ResolveConnection(bearerCtx(tokens[tc.Run]), req)
			require.Equal(t, tc.Want.Code, status.Code(err).String(), "%v", err)
			if err != nil {
				require.Equal(t, "ERROR_REASON_"+tc.Want.Reason, reasonOf(err).String(), err)
				require.Nil(t, c)
				return
			}
			require.Equal(t, "CONNECTION_KIND_"+tc.Want.Kind, c.GetKind().String())
			got, err := regions(context.Background(), c)
			require.NoError(t, err)
			require.Equal(t, tc.Want.Sees, got)
		})
	}

	t.Run("reserved role names are refused", func(t *testing.T) {
		for _, n := range rs.RefusedRoleNames {
			_, err := f.r.roles().CreateRole(adminCtx(), &rolesetv1.CreateRoleRequest{ClusterId: f.clusterID, Name: n})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%q: %v", n, err)
		}
	})
}

// regions logs in with a credential (real SCRAM) and returns the regions of the orders it
// sees, sorted and once each.
func regions(ctx context.Context, c *rolesetv1.ResolveConnectionResponse) ([]string, error) {
	conn, err := pgx.Connect(ctx, loginDSN(c.GetHost(), int(c.GetPort()), c.GetUser(), c.GetPassword(), c.GetDatabase()))
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT DISTINCT region FROM orders ORDER BY region`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
