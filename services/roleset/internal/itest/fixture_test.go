package itest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// fixture is a data table "main" with three roles and an RLS-protected table in the seed's
// form: each policy tests membership with pg_has_role(current_user, '<role>', 'member'), so one
// policy serves a role's own login and a wm_set_ login alike.
type fixture struct {
	*env
	r                *replica
	emea, apac, amer *rolesetv1.Role
}

func newFixture(t *testing.T, replicas int) *fixture { return newFixtureN(t, replicas) }

func newFixtureTB(t testing.TB) *fixture { return newFixtureN(t, 1) }

func newFixtureN(t testing.TB, replicas int) *fixture {
	e := newEnv(t)
	f := &fixture{env: e}
	f.r = e.start()
	for i := 1; i < replicas; i++ {
		e.start()
	}
	e.registerCluster(f.r)
	sfx := randHex(3)
	f.emea = e.createRole(f.r, "emea_"+sfx)
	f.apac = e.createRole(f.r, "apac_"+sfx)
	f.amer = e.createRole(f.r, "amer_"+sfx)
	superExec(t, e.targetDSN,
		`CREATE TABLE orders (id int PRIMARY KEY, region text NOT NULL)`,
		`INSERT INTO orders VALUES (1, 'emea'), (2, 'emea'), (3, 'apac'), (4, 'apac'), (5, 'amer')`,
		`ALTER TABLE orders ENABLE ROW LEVEL SECURITY`)
	for _, r := range []*rolesetv1.Role{f.emea, f.apac, f.amer} {
		region := r.GetName()[:4]
		superExec(t, e.targetDSN,
			fmt.Sprintf(`GRANT SELECT ON orders TO "%s"`, r.GetName()),
			fmt.Sprintf(`CREATE POLICY p_%[1]s ON orders FOR SELECT USING (region = '%[1]s' AND pg_has_role(current_user, '%[2]s', 'member'))`, region, r.GetName()))
	}
	_, err := f.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: "main",
		ClusterId: e.clusterID, Database: e.targetDB, AdminUser: e.adminUser, AdminPassword: e.adminPass, DefaultRole: "$none",
		ViewerAccess: proto.Bool(true), CredentialMode: rolesetv1.CredentialMode_CREDENTIAL_MODE_DIRECT})
	require.NoError(t, err)
	_, err = f.r.datatables().SetPermissions(adminCtx(), &rolesetv1.SetPermissionsRequest{Workspace: "ws", Name: "main",
		DefaultRole: f.emea.GetRoleId(), Roles: map[string]*rolesetv1.Tenants{
			f.emea.GetRoleId(): {Tenants: []string{"g/emea"}},
			f.apac.GetRoleId(): {Tenants: []string{"g/apac"}},
			f.amer.GetRoleId(): {Tenants: []string{"g/amer", "u/frank"}},
			"admin":            {Tenants: []string{"u/dave", "u/alice"}},
		}})
	require.NoError(t, err)
	p := e.policy
	p.setMember(member{Email: "alice@x", Username: "alice", Groups: []string{"emea"}})
	p.setMember(member{Email: "bob@x", Username: "bob", Groups: []string{"apac"}})
	p.setMember(member{Email: "carol@x", Username: "carol", Groups: []string{"apac", "emea"}})
	p.setMember(member{Email: "dave@x", Username: "dave", Admin: true})
	p.setMember(member{Email: "eve@x", Username: "eve"})
	p.setMember(member{Email: "frank@x", Username: "frank"})
	p.setMember(member{Email: "pub@x", Username: "pub"})
	p.setMember(member{Email: "boss@x", Username: "boss", Admin: true})
	return f
}

func (f *fixture) viewerRun(viewer string) string {
	return f.policy.run("u/pub", 1 /* APP_SESSION */, viewer)
}

func (f *fixture) resolve(r *replica, token, ref string) (*rolesetv1.ResolveConnectionResponse, error) {
	return r.conns().ResolveConnection(bearerCtx(token), &rolesetv1.ResolveConnectionRequest{Reference: ref})
}
