package api_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/billingclient"
	"github.com/millwright/millwright/pkg/errs"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// members returns every member of ws as "username email role [disabled]", through the
// snapshot billing resyncs from.
func members(t *testing.T, r *replica, ws string) map[string]string {
	t.Helper()
	snap, err := r.ws.GetMembershipSnapshot(service, &policyv1.GetMembershipSnapshotRequest{})
	require.NoError(t, err)
	out := map[string]string{}
	for _, m := range snap.GetMembers() {
		if m.GetWorkspace() != ws {
			continue
		}
		v := m.GetEmail() + " " + m.GetRole().String()
		if m.GetDisabled() {
			v += " disabled"
		}
		out[m.GetUsername()] = v
	}
	return out
}

// TestSeatCheckerGuardsMemberChanges: every member write that may add seats is priced by the
// seat checker (billing) at the stream head before it commits; writes that cannot add seats
// (demoting, disabling, re-saving, removing) never ask; a refusal is returned as billing gave
// it and writes nothing.
func TestSeatCheckerGuardsMemberChanges(t *testing.T) {
	seats := &fakeSeats{}
	r := startReplica(t, testdb.DSN(t), replicaOpts{seats: seats})
	ctx := context.Background()
	head := func() int64 {
		h, err := r.parts.Store.Head(ctx)
		require.NoError(t, err)
		return h
	}

	h := head()
	workspaceWith(t, r, "w")
	require.Equal(t, []memberCheck{{pos: h, change: billingclient.MemberChange{
		Workspace: "w", Username: "admin", Email: "admin@x", Role: "admin"}}}, seats.memberChecks(),
		"the first admin of a new workspace is priced")
	_, err := r.ws.CreateWorkspace(admin, &policyv1.CreateWorkspaceRequest{Workspace: "w", Name: "w", AdminEmail: "new@x", AdminUsername: "new"})
	requireCode(t, err, codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS)
	require.Len(t, seats.memberChecks(), 1, "an existing workspace is not priced")

	upsert := func(user, email string, role policyv1.Role, disabled bool) error {
		_, err := r.ws.UpsertMember(admin, &policyv1.UpsertMemberRequest{Workspace: "w", Username: user, Email: email,
			Role: role, Disabled: disabled})
		return err
	}
	dev, op, adm := policyv1.Role_ROLE_DEVELOPER, policyv1.Role_ROLE_OPERATOR, policyv1.Role_ROLE_ADMIN
	steps := []struct {
		name     string
		user     string
		email    string
		role     policyv1.Role
		disabled bool
		priced   bool
	}{
		{"new developer", "dev", "dev@x", dev, false, true},
		{"same state again", "dev", "dev@x", dev, false, false},
		{"new operator", "op", "op@x", op, false, true},
		{"operator promoted to developer", "op", "op@x", dev, false, true},
		{"developer demoted to operator", "op", "op@x", op, false, false},
		{"operator promoted to admin", "op", "op@x", adm, false, true},
		{"admin made developer", "op", "op@x", dev, false, false},
		{"developer made admin", "op", "op@x", adm, false, false},
		{"disabled", "dev", "dev@x", dev, true, false},
		{"re-enabled", "dev", "dev@x", dev, false, true},
		{"another email is another person", "dev", "dev2@x", dev, false, true},
		{"new member added disabled", "ghost", "ghost@x", dev, true, false},
		{"disabled and promoted at once", "ghost", "ghost@x", adm, true, false},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before := len(seats.memberChecks())
			h := head()
			require.NoError(t, upsert(s.user, s.email, s.role, s.disabled))
			if !s.priced {
				require.Len(t, seats.memberChecks(), before, "a change that cannot add seats does not ask billing")
				return
			}
			require.Len(t, seats.memberChecks(), before+1)
			role := map[policyv1.Role]string{dev: "developer", op: "operator", adm: "admin"}[s.role]
			require.Equal(t, memberCheck{pos: h, change: billingclient.MemberChange{
				Workspace: "w", Username: s.user, Email: s.email, Role: role, Disabled: s.disabled}},
				seats.memberChecks()[before], "priced at the stream head, with the member as it will be written")
		})
	}
	t.Run("removing", func(t *testing.T) {
		before := len(seats.memberChecks())
		_, err := r.ws.RemoveMember(admin, &policyv1.RemoveMemberRequest{Workspace: "w", Username: "ghost"})
		require.NoError(t, err)
		require.Len(t, seats.memberChecks(), before)
	})

	t.Run("refused: nothing written", func(t *testing.T) {
		require.NoError(t, upsert("op", "op@x", op, false))
		require.NoError(t, upsert("off", "off@x", dev, true))
		usage := func(s string) *billingv1.SeatUsage { return &billingv1.SeatUsage{Seats: s} }
		seats.setMemberErr(billingclient.Refusal(usage("3"), usage("4"), 3, "over the cap"))
		defer seats.setMemberErr(nil)
		was, h := members(t, r, "w"), head()
		for name, try := range map[string]func() error{
			"new developer":     func() error { return upsert("late", "late@x", dev, false) },
			"operator promoted": func() error { return upsert("op", "op@x", dev, false) },
			"re-enabled":        func() error { return upsert("off", "off@x", dev, false) },
			"new workspace": func() error {
				_, err := r.ws.CreateWorkspace(admin, &policyv1.CreateWorkspaceRequest{Workspace: "v", Name: "v",
					AdminEmail: "boss@x", AdminUsername: "boss"})
				return err
			},
		} {
			t.Run(name, func(t *testing.T) {
				err := try()
				requireCode(t, err, codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_SEAT_CAP_EXCEEDED)
				require.Equal(t, map[string]string{"before": "3", "after": "4", "cap": "3"}, errs.Infos(err)[0].GetMetadata())
				require.Equal(t, was, members(t, r, "w"))
				require.Equal(t, h, head(), "no event: the refused change was not committed")
			})
		}
		_, err := r.set.GetOperatorSettings(admin, &policyv1.GetOperatorSettingsRequest{Workspace: "v"})
		requireCode(t, err, codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND)

		// Changes that cannot add seats still go through while billing refuses everything.
		before := len(seats.memberChecks())
		require.NoError(t, upsert("op", "op@x", op, true))
		require.NoError(t, upsert("dev", "dev2@x", op, false))
		_, err = r.ws.RemoveMember(admin, &policyv1.RemoveMemberRequest{Workspace: "w", Username: "off"})
		require.NoError(t, err)
		require.Len(t, seats.memberChecks(), before)
	})
}
