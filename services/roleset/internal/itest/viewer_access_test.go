package itest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// A data table's viewer_access gates ?as=viewer (issue 14): turned off, the next resolve of a
// warm, cached viewer connection is refused with VIEWER_ACCESS_OFF on every replica (the
// change is a datatable event); an upsert that does not name it keeps it; named roles are not
// affected; turned on again, the viewer connects again.
func TestViewerAccessGatesAsViewer(t *testing.T) {
	f := newFixture(t, 2)
	other := f.replicas[1]
	tok := f.viewerRun("alice@x")
	for _, r := range []*replica{f.r, other} {
		_, err := f.resolve(r, tok, "datatable://main?as=viewer")
		require.NoError(t, err, "opted in: the viewer connects (and the answer is cached)")
	}
	upsert := func(access *bool) *rolesetv1.Datatable {
		t.Helper()
		res, err := f.r.datatables().UpsertDatatable(adminCtx(), &rolesetv1.UpsertDatatableRequest{Workspace: "ws", Name: "main",
			ClusterId: f.clusterID, Database: f.targetDB, AdminUser: f.adminUser, AdminPassword: f.adminPass,
			DefaultRole: f.emea.GetRoleId(), ViewerAccess: access})
		require.NoError(t, err)
		return res.GetDatatable()
	}
	refused := func(r *replica) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := f.resolve(r, tok, "datatable://main?as=viewer")
			assert.Equal(c, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Equal(c, commonv1.ErrorReason_ERROR_REASON_VIEWER_ACCESS_OFF, reasonOf(err))
			infos := errs.Infos(err)
			if assert.Len(c, infos, 1) {
				assert.Equal(c, "main", infos[0].GetMetadata()["datatable"])
			}
		}, 5*time.Second, 5*time.Millisecond)
	}

	require.False(t, upsert(proto.Bool(false)).GetViewerAccess())
	_, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
	require.Equal(t, commonv1.ErrorReason_ERROR_REASON_VIEWER_ACCESS_OFF, reasonOf(err),
		"refused at once on the replica that wrote it: %v", err)
	refused(other)

	require.False(t, upsert(nil).GetViewerAccess(), "an upsert without viewer_access keeps it off")
	refused(f.r)
	aliceRun := f.policy.run("u/alice", policyv1.RunOrigin_RUN_ORIGIN_DIRECT, "alice@x")
	c, err := f.resolve(f.r, aliceRun, "datatable://main")
	require.NoError(t, err, "the default role (for the run's owner) does not depend on viewer_access")
	require.Equal(t, f.emea.GetName(), c.GetUser())

	require.True(t, upsert(proto.Bool(true)).GetViewerAccess())
	for _, r := range []*replica{f.r, other} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := f.resolve(r, tok, "datatable://main?as=viewer")
			assert.NoError(c, err)
		}, 5*time.Second, 5*time.Millisecond)
	}
}
