package itest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestCreateRoleRace: 8 concurrent CreateRole calls of one name (client retries while the
// first is in flight, or two admins), spread over two replicas, several rounds. Exactly one
// succeeds, every other answers AlreadyExists; the catalog row is ready, names the cluster
// role's oid, and the role logs in (scram-sha-256) with the password the row holds; the
// cluster role carries the winner's marker (no orphan left by a loser deleting the shared row).
// A last round sends more racers to one replica than its pool has connections (24): the
// waiters hold every connection, so a creation that needed a second one would never finish.
func TestCreateRoleRace(t *testing.T) {
	const racers, rounds, flood = 8, 5, 40
	e := newEnv(t)
	a := e.start()
	b := e.start()
	e.registerCluster(a)
	ctx := context.Background()
	keys := e.keyring(t)
	super, err := pgx.Connect(ctx, e.superDSN)
	require.NoError(t, err)
	defer super.Close(ctx)

	for round := range rounds + 1 {
		n, replicas := racers, []*replica{a, b}
		if round == rounds {
			n, replicas = flood, []*replica{a}
		}
		t.Run(fmt.Sprintf("round %d: %d racers on %d replicas", round, n, len(replicas)), func(t *testing.T) {
			name := "race_" + randHex(4)
			cctx, cancel := context.WithTimeout(adminCtx(), 30*time.Second)
			defer cancel()
			start := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var won []*rolesetv1.Role
			var refused int
			var other []error
			for i := range n {
				r := replicas[i%len(replicas)]
				wg.Go(func() {
					<-start
					resp, err := r.roles().CreateRole(cctx, &rolesetv1.CreateRoleRequest{ClusterId: e.clusterID, Name: name})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won = append(won, resp.GetRole())
					case status.Code(err) == codes.AlreadyExists && reasonOf(err) == commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS:
						refused++
					default:
						other = append(other, err)
					}
				})
			}
			close(start)
			wg.Wait()
			require.Empty(t, other, "every loser answers AlreadyExists")
			require.Len(t, won, 1, "exactly one CreateRole succeeds")
			require.Equal(t, n-1, refused)

			var id, oid int64
			var state string
			var enc []byte
			require.NoError(t, a.pool.QueryRow(ctx, `SELECT id, state, coalesce(oid, 0), password_enc FROM datatable_role
WHERE cluster_id = $1 AND name = $2`, e.clusterID, name).Scan(&id, &state, &oid, &enc))
			require.Equal(t, "ready", state)
			require.Equal(t, won[0].GetRoleId(), fmt.Sprint(id))
			require.EqualValues(t, won[0].GetOid(), oid)

			var clusterOID int64
			var comment *string
			require.NoError(t, super.QueryRow(ctx, `SELECT oid::bigint, shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1`,
				name).Scan(&clusterOID, &comment))
			require.Equal(t, oid, clusterOID, "the row names the cluster role")
			require.NotNil(t, comment)
			require.True(t, a.eng.RoleProof(id).Verify(*comment, clusterOID), "the cluster role is the winner's: %s", *comment)

			pw, err := keys.Decrypt(enc, fmt.Sprintf("role:%d", id))
			require.NoError(t, err)
			require.NoError(t, e.canLogin(name, pw), "the role logs in with the password its row holds")
		})
	}
}
