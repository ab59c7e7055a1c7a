package api_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// A run removed by retention answers like a finished run everywhere its job token is taken
// (Unauthenticated), through the service's own maintenance loop at a clock the test moves.
func TestRemovedRunAnswersLikeAFinishedOne(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	r := startReplica(t, testdb.DSN(t), replicaOpts{clock: clock})
	workspaceWith(t, r, "a")
	member(t, r, "a", "alice", policyv1.Role_ROLE_OPERATOR)
	alice := userToken(t, r, "a", "alice")
	record := func() *policyv1.RecordRunResponse {
		t.Helper()
		resp, err := r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "a", JobId: nextJob(),
			PermissionedAs: "u/alice", Origin: policyv1.RunOrigin_RUN_ORIGIN_DIRECT, Credential: alice})
		require.NoError(t, err)
		return resp
	}
	finished, live := record(), record()
	_, err := r.run.FinishRun(service, &policyv1.FinishRunRequest{Workspace: "a", JobId: finished.GetRun().GetJobId()})
	require.NoError(t, err)
	id, err := r.run.GetRunIdentity(service, &policyv1.GetRunIdentityRequest{JobToken: live.GetJobToken()})
	require.NoError(t, err)
	require.Equal(t, "alice@x", id.GetRun().GetViewerEmail())

	refused := func(tok string) {
		t.Helper()
		_, err := r.run.GetRunIdentity(service, &policyv1.GetRunIdentityRequest{JobToken: tok})
		requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		_, err = r.run.ResultCacheKey(service, &policyv1.ResultCacheKeyRequest{JobToken: tok, Kind: "script",
			Runnable: &policyv1.ResultCacheKeyRequest_ScriptHash{ScriptHash: "00000000000000a1"}, ArgsJson: "{}"})
		requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		_, err = r.run.RecordRun(service, &policyv1.RecordRunRequest{Workspace: "a", JobId: nextJob(),
			Origin: policyv1.RunOrigin_RUN_ORIGIN_JOB_TOKEN, Credential: tok})
		requireCode(t, err, codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
	}
	refused(finished.GetJobToken())

	// Three weeks on, past the 14-day retention of this week's partition.
	offset.Store(int64(22 * 24 * time.Hour))
	res, err := r.parts.Maintainer.Once(t.Context())
	require.NoError(t, err)
	require.NotEmpty(t, res.Dropped)
	refused(finished.GetJobToken())
	refused(live.GetJobToken())
	_, err = r.run.FinishRun(service, &policyv1.FinishRunRequest{Workspace: "a", JobId: live.GetRun().GetJobId()})
	requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)
}
