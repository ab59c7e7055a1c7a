package itest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestViewersSeeTheirRows: two viewers in different groups log in with what ResolveConnection
// returned (real SCRAM) and see different rows; a viewer in both gets a wm_set_ login and sees
// both; after a group change the viewer resolves to another login; the warm path calls no
// policy.
func TestViewersSeeTheirRows(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	cases := []struct {
		viewer  string
		want    []int
		kind    rolesetv1.ConnectionKind
		userPfx string
	}{
		{"alice@x", []int{1, 2}, rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, f.emea.GetName()},
		{"bob@x", []int{3, 4}, rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE, f.apac.GetName()},
		{"carol@x", []int{1, 2, 3, 4}, rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, "wm_set_"},
	}
	for _, tc := range cases {
		t.Run(tc.viewer, func(t *testing.T) {
			c, err := f.resolve(f.r, f.viewerRun(tc.viewer), "datatable://main?as=viewer")
			require.NoError(t, err)
			require.Equal(t, tc.kind, c.GetKind())
			require.True(t, strings.HasPrefix(c.GetUser(), tc.userPfx), c.GetUser())
			got, err := query(ctx, c)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("warm path makes no policy call", func(t *testing.T) {
		tok := f.viewerRun("carol@x")
		first, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
		require.NoError(t, err)
		before := f.policy.Calls()
		for range 20 {
			again, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
			require.NoError(t, err)
			require.Equal(t, first.GetUser(), again.GetUser())
			require.Equal(t, first.GetPassword(), again.GetPassword())
		}
		require.Equal(t, before, f.policy.Calls())
	})

	t.Run("group change resolves to another login", func(t *testing.T) {
		tok := f.viewerRun("carol@x")
		before, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
		require.NoError(t, err)
		f.policy.setMember(member{Email: "carol@x", Username: "carol", Groups: []string{"emea", "amer"}})
		require.Eventually(t, func() bool {
			c, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
			return err == nil && c.GetUser() != before.GetUser()
		}, 5e9, 1e7)
		after, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(after.GetUser(), "wm_set_"))
		got, err := query(ctx, after)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 5}, got)
		// The old login was not edited: it still holds emea+apac and still works.
		old, err := query(ctx, before)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 3, 4}, old)
	})

	t.Run("explain gives the trace and no credential", func(t *testing.T) {
		resp, err := f.r.conns().ExplainConnection(bearerCtx(f.viewerRun("bob@x")), &rolesetv1.ExplainConnectionRequest{Reference: "datatable://main?as=viewer"})
		require.NoError(t, err)
		require.True(t, resp.GetAllowed())
		require.Equal(t, []string{f.apac.GetName()}, resp.GetRoles())
		var matched []string
		for _, e := range resp.GetTrace() {
			if e.GetMatched() {
				matched = append(matched, e.GetRole()+"<-"+e.GetTenant())
			}
		}
		require.Equal(t, []string{f.apac.GetName() + "<-g/apac"}, matched)
	})
	_ = policyv1.RunOrigin_RUN_ORIGIN_APP_SESSION
}
