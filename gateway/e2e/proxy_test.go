package e2e

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// TestProxyViewerLeavesGroup, over the real stack (policy, roleset and its proxy, the demo): a
// viewer whose groups give her a set login connects through the proxy with her run's ticket;
// removed from one of the groups (through policy), her open session ends, its backend is
// terminated, and the ticket no longer logs in.
func TestProxyViewerLeavesGroup(t *testing.T) {
	needsStack(t)
	st := StartStack(t)
	ctx := context.Background()
	dial := func(addr string) *grpc.ClientConn { return dialT(t, addr) }
	groups := policyv1.NewWorkspaceServiceClient(dial(st.Policy))
	conns := rolesetv1.NewConnectionServiceClient(dial(st.Roleset))
	admin := repBearer(ctx, st.AdminToken(t))
	analysts := func(members ...string) {
		_, err := groups.UpsertGroup(admin, &policyv1.UpsertGroupRequest{Workspace: "demo", Name: "analysts", Members: members})
		require.NoError(t, err)
	}

	analysts("devon", "alice") // alice: sales_emea (g/emea) and sales_all (g/analysts)
	job := rsRecordRun(t, st, st.Token(t, "service-token"), "RUN_ORIGIN_DIRECT", "u/alice", st.Token(t, "alice-token"))
	var c *rolesetv1.ResolveConnectionResponse
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		c, err = conns.ResolveConnection(repBearer(ctx, job), &rolesetv1.ResolveConnectionRequest{Reference: "datatable://main?as=viewer"})
		if assert.NoError(ct, err) {
			assert.Equal(ct, rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET, c.GetKind())
		}
	}, 10*time.Second, 20*time.Millisecond, "the group change reaches roleset")
	require.Equal(t, rolesetv1.CredentialMode_CREDENTIAL_MODE_PROXY, c.GetCredentialMode())
	dsn := (&url.URL{Scheme: "postgres", User: url.UserPassword(c.GetUser(), c.GetPassword()),
		Host: net.JoinHostPort(c.GetHost(), strconv.Itoa(int(c.GetPort()))), Path: "/" + c.GetDatabase(),
		RawQuery: "sslmode=require"}).String()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var pid, rows int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid(), (SELECT count(*) FROM orders)`).Scan(&pid, &rows))
	require.Equal(t, 5, rows, "sales_all sees every region")

	super, err := pgx.Connect(ctx, st.SuperuserURL(t, "postgres"))
	require.NoError(t, err)
	defer super.Close(ctx)
	start := time.Now()
	analysts("devon")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var n int
		assert.NoError(ct, super.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n))
		assert.Zero(ct, n, "the upstream backend is gone")
	}, 10*time.Second, 5*time.Millisecond)
	t.Logf("alice left g/analysts -> her set login's session and backend gone in %v", time.Since(start))
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "the client's session is closed")

	_, err = pgx.Connect(ctx, dsn)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "28P01", pe.Code, "the ticket no longer logs in")
}
