package itest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestRoleChangeRace: changes of one role's cluster row made at once (disables, enables and
// renames from two replicas, their sweeps reconciling the same role, then deletes racing the
// sweeps) never answer Internal. Postgres refuses two ALTER ROLEs of one role in overlapping
// transactions ("tuple concurrently updated", XX000): every change of a catalog role on the
// cluster takes that role's lock, so they queue instead (docs/reliability.md, the finding of
// chaos cycle 62).
func TestRoleChangeRace(t *testing.T) {
	const racers, iterations = 6, 15
	e := newEnv(t)
	a := e.start()
	b := e.start()
	e.registerCluster(a)
	ctx, cancel := context.WithTimeout(adminCtx(), 2*time.Minute)
	defer cancel()
	replicas := []*replica{a, b}

	var mu sync.Mutex
	var unexpected []error
	record := func(what string, err error, allowed ...codes.Code) {
		code := status.Code(err)
		for _, c := range append(allowed, codes.OK) {
			if code == c {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		unexpected = append(unexpected, fmt.Errorf("%s: %w", what, err))
	}

	for round := range 3 {
		created, err := a.roles().CreateRole(ctx, &rolesetv1.CreateRoleRequest{ClusterId: e.clusterID, Name: "chg_" + randHex(4)})
		require.NoError(t, err)
		id := created.GetRole().GetRoleId()
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			r := replicas[i%2]
			wg.Go(func() {
				<-start
				for j := range iterations {
					_, err := r.roles().UpdateRole(ctx, &rolesetv1.UpdateRoleRequest{RoleId: id, Enabled: new((i+j)%2 == 0)})
					record(fmt.Sprintf("round %d racer %d: UpdateRole enabled", round, i), err)
				}
			})
		}
		for _, r := range replicas {
			wg.Go(func() {
				<-start
				for range iterations {
					_, err := r.roles().Sweep(ctx, &rolesetv1.SweepRequest{})
					record(fmt.Sprintf("round %d: Sweep", round), err)
				}
			})
		}
		close(start)
		wg.Wait()

		// Deletes from both replicas, racing each other and both replicas' sweeps: one deletes,
		// the others find it gone (or gone meanwhile).
		start = make(chan struct{})
		for i := range racers {
			r := replicas[i%2]
			wg.Go(func() {
				<-start
				_, err := r.roles().DeleteRole(ctx, &rolesetv1.DeleteRoleRequest{RoleId: id})
				record(fmt.Sprintf("round %d racer %d: DeleteRole", round, i), err, codes.NotFound)
			})
		}
		for _, r := range replicas {
			wg.Go(func() {
				<-start
				_, err := r.roles().Sweep(ctx, &rolesetv1.SweepRequest{})
				record(fmt.Sprintf("round %d: Sweep after delete", round), err)
			})
		}
		close(start)
		wg.Wait()
		var left int
		require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM datatable_role WHERE id = $1`, id).Scan(&left))
		require.Zero(t, left, "the role row is gone")
	}
	require.Empty(t, unexpected, "role changes racing each other and the reconciler answer only OK or NotFound")
}
