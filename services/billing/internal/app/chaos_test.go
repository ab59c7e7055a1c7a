package app_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/failpoint"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/billing/internal/billingtest"
)

// TestChaosPolicyKills is the policy half of docs/reliability.md, "Process kills at named
// failpoints": the fault build of the real policy binary, priced by the real billing, is
// restarted armed with a failpoint picked at random among policy's (the seat-priced settings
// write and its stream listener), driven through builder flips and member writes until the
// failpoint SIGKILLs it, restarted unarmed; then billing's projection must equal policy's
// state (members and builder flags) and billing's seats must be what policy's state costs
// (no builder-on without its seat pricing). make test runs 20 cycles, make chaos
// MILLWRIGHT_CHAOS_POLICY_KILLS.
func TestChaosPolicyKills(t *testing.T) {
	cycles := 20 // make test; make chaos runs MILLWRIGHT_CHAOS_POLICY_KILLS
	if v := os.Getenv("MILLWRIGHT_CHAOS_POLICY_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "MILLWRIGHT_CHAOS_POLICY_KILLS")
		cycles = n
	}
	// policy's failpoints, read from its source (its list is internal to its module).
	names, err := failpoint.Sites("../../../policy", "../../../../pkg/stream/stream.go")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	pp := startPairWith(t, "-tags=failpoints")
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := pp.ws.CreateWorkspace(ctx, &policyv1.CreateWorkspaceRequest{Workspace: "ops", Name: "Ops", AdminEmail: "boss@acme.test", AdminUsername: "boss"})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "policy did not come up")
	for i := range 3 {
		_, err := pp.ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: "ops", Username: fmt.Sprint("op", i),
			Email: fmt.Sprintf("op%d@acme.test", i), Role: policyv1.Role_ROLE_OPERATOR})
		require.NoError(t, err)
	}
	policyPool, billingPool := billingtest.Pool(t, pp.policy.DSN), billingtest.Pool(t, pp.billingDSN)

	counts := map[string][2]int{}
	var recovery []time.Duration
	for i := range cycles {
		fp := names[rand.IntN(len(names))]
		pp.policy.RestartWith(t, failpoint.Arm(fp, 1))
		policyWorkload(pp, i)
		fired := false
		select {
		case <-pp.policy.Exited():
			fired = true // nothing else ends it
		case <-time.After(500 * time.Millisecond):
		}
		c := counts[fp]
		c[0]++
		if fired {
			c[1]++
		}
		counts[fp] = c
		start := time.Now()
		pp.policy.Restart(t)
		require.Eventually(t, func() bool {
			_, err := pp.set.GetOperatorSettings(ctx, &policyv1.GetOperatorSettingsRequest{Workspace: "ops"})
			return err == nil
		}, 30*time.Second, 5*time.Millisecond)
		recovery = append(recovery, time.Since(start))
		requireProjectionEqualsPolicy(t, pp, policyPool, billingPool)
	}
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "FIGURES | %s | %d | %d |\n", n, counts[n][0], counts[n][1])
	}
	slices.Sort(recovery)
	fmt.Fprintf(&b, "FIGURES policy cycles=%d recovery median=%v max=%v\n", cycles,
		recovery[len(recovery)/2].Round(time.Millisecond), recovery[len(recovery)-1].Round(time.Millisecond))
	t.Log("\n" + b.String())
}

// policyWorkload flips builder rights on and off (priced when turned on) and writes a member,
// so every failpoint of policy's is passed; the calls may fail as the process dies under them.
func policyWorkload(pp *pair, cycle int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Once the failpoint has killed policy, the rest would only wait for it (server.Dial's
	// clients wait for a connection): stop there.
	exited := pp.policy.Exited()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, on := range []bool{true, false, true} {
		_, _ = pp.set.UpdateOperatorSettings(ctx, &policyv1.UpdateOperatorSettingsRequest{Workspace: "ops",
			Patch: &policyv1.OperatorSettingsPatch{Builder: proto.Bool(on)}})
	}
	_, _ = pp.ws.UpsertMember(ctx, &policyv1.UpsertMemberRequest{Workspace: "ops", Username: "temp",
		Email: "temp@acme.test", Role: policyv1.Role_ROLE_OPERATOR, Disabled: cycle%2 == 0})
	_, _ = pp.set.UpdateOperatorSettings(ctx, &policyv1.UpdateOperatorSettingsRequest{Workspace: "ops",
		Patch: &policyv1.OperatorSettingsPatch{Builder: proto.Bool(cycle%2 == 0)}})
}

// requireProjectionEqualsPolicy waits (30 s at most) until billing, following policy's
// stream, holds exactly policy's members and builder flags, and counts the authors and
// operators policy's state costs: builder on in a workspace makes its operators authors.
func requireProjectionEqualsPolicy(t *testing.T, pp *pair, policyDB, billingDB interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) {
	t.Helper()
	ctx := context.Background()
	lines := func(db interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}, sql string) string {
		rows, err := db.Query(ctx, sql)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(got, "\n")
	}
	var last string
	ok := assertEventually(30*time.Second, func() bool {
		pol := lines(policyDB, `SELECT concat_ws(' ', workspace_id, username, email, role, disabled) FROM member ORDER BY 1`) +
			"\nbuilder: " + lines(policyDB, `SELECT workspace_id FROM workspace_settings WHERE operator_builder_on(operator_settings) ORDER BY 1`) +
			"\nseats: " + lines(policyDB, `SELECT concat_ws(' ', count(*) FILTER (WHERE a), count(*) FILTER (WHERE NOT a)) FROM (
				SELECT bool_or(m.role <> 'operator' OR operator_builder_on(s.operator_settings)) AS a
				FROM member m JOIN workspace_settings s USING (workspace_id) WHERE NOT m.disabled GROUP BY m.email) x`)
		u, err := pp.bill.GetSeatUsage(ctx, &billingv1.GetSeatUsageRequest{})
		if err != nil {
			last = err.Error()
			return false
		}
		bill := lines(billingDB, `SELECT concat_ws(' ', workspace, username, email, role, disabled) FROM member ORDER BY 1`) +
			"\nbuilder: " + lines(billingDB, `SELECT workspace FROM workspace_builder WHERE builder ORDER BY 1`) +
			fmt.Sprintf("\nseats: %d %d", u.GetUsage().GetAuthors(), u.GetUsage().GetOperators())
		last = "policy:\n" + pol + "\nbilling:\n" + bill
		return pol == bill
	})
	require.True(t, ok, "billing's projection does not equal policy's state:\n%s", last)
}

func assertEventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
