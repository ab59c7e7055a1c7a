package itest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
)

// auditEvents returns the events of roleset's trail whose body contains s (a job token's keyed
// hash, a ticket id), oldest first.
func (e *env) auditEvents(t *testing.T, s string) []audit.Event {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.svcDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT body FROM audit_event WHERE strpos(body, $1) > 0 ORDER BY seq`, s)
	require.NoError(t, err)
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := make([]audit.Event, len(bodies))
	for i, b := range bodies {
		require.NoError(t, json.Unmarshal([]byte(b), &out[i]))
	}
	return out
}

// requireNotInTrail fails if any event of the trail holds one of secrets in clear.
func (e *env) requireNotInTrail(t *testing.T, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		require.Empty(t, e.auditEvents(t, s), "a secret is in the audit trail in clear")
	}
}

// jobTokenHash is the job token as the trail records it, asked of AuditService as an auditor
// would (HashAuditValue).
func (r *replica) jobTokenHash(t *testing.T, token string) string {
	t.Helper()
	res, err := audit.NewService(r.rec).HashAuditValue(auth.WithIdentity(context.Background(), auth.Identity{Kind: auth.Superadmin}),
		&auditv1.HashAuditValueRequest{Value: token})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(res.GetHash(), audit.HashPrefix), res.GetHash())
	return res.GetHash()
}

// ResolveConnection's decisions are in roleset's audit trail (issue 15): a credential issued
// with its login, roles, kind and mode, a refusal with its reason, the job token only as its
// keyed hash and no password anywhere; identical warm decisions are one event with a count;
// when the trail cannot be written, no credential is issued unless credentials are configured
// to fail open.
func TestAuditResolveConnection(t *testing.T) {
	f := newFixture(t, 1)
	const rpc = rolesetv1.ConnectionService_ResolveConnection_FullMethodName
	only := func(t *testing.T, events []audit.Event) audit.Event {
		t.Helper()
		require.Len(t, events, 1)
		require.Equal(t, rpc, events[0].RPC)
		require.Equal(t, audit.Credential, events[0].Class)
		return events[0]
	}

	t.Run("granted", func(t *testing.T) {
		tok := f.viewerRun("alice@x")
		c, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
		require.NoError(t, err)
		hash := f.r.jobTokenHash(t, tok)
		e := only(t, f.auditEvents(t, hash))
		require.Equal(t, audit.Granted, e.Outcome)
		require.Equal(t, int64(1), e.Count)
		require.Equal(t, "reference=datatable://main?as=viewer", e.Object)
		require.Equal(t, map[string]string{"job_token": hash, "login": c.GetUser(), "roles": strings.Join(c.GetRoles(), ","),
			"kind": "ROLE", "credential_mode": "DIRECT", "data_table": "ws/main", "job_id": e.Details["job_id"],
			"subject": "alice@x"}, e.Details)
		require.NotEmpty(t, e.Details["job_id"])
		f.requireNotInTrail(t, c.GetPassword(), tok)
	})

	t.Run("refused", func(t *testing.T) {
		tok := "mwj_" + randHex(16) // no such run
		_, err := f.resolve(f.r, tok, "datatable://main")
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
		e := only(t, f.auditEvents(t, f.r.jobTokenHash(t, tok)))
		require.Equal(t, audit.Refused, e.Outcome)
		require.Equal(t, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED.String(), e.Rule)
		require.NotContains(t, e.Details, "login", "nothing was issued")
		f.requireNotInTrail(t, tok)
	})

	t.Run("repeats are counted", func(t *testing.T) {
		f.audit.Window = time.Minute // the whole test is one window: the count is exact
		r := f.start()
		tok := f.viewerRun("carol@x")
		for range 50 {
			_, err := f.resolve(r, tok, "datatable://main?as=viewer")
			require.NoError(t, err)
		}
		hash := r.jobTokenHash(t, tok)
		require.Len(t, f.auditEvents(t, hash), 1, "the first is written before its answer, the repeats are counted")
		r.rec.Close() // the window's end: the count is written
		events := f.auditEvents(t, hash)
		require.Len(t, events, 2)
		require.Equal(t, []int64{1, 49}, []int64{events[0].Count, events[1].Count})
		require.Equal(t, events[0].Details, events[1].Details, "the count stands for the same decision")
		require.False(t, events[1].LastTime.Before(events[1].Time))
	})

	t.Run("fails closed", func(t *testing.T) {
		f.audit.Window, f.audit.FailOpen = time.Second, "credential"
		open := f.start()
		// From now on no event can be written: a constraint that no new row satisfies.
		superExec(t, f.svcDSN, `ALTER TABLE audit_event ADD CONSTRAINT audit_test_off CHECK (false) NOT VALID`)
		t.Cleanup(func() { superExec(t, f.svcDSN, `ALTER TABLE audit_event DROP CONSTRAINT audit_test_off`) })

		tok := f.viewerRun("bob@x")
		c, err := f.resolve(f.r, tok, "datatable://main?as=viewer")
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		require.Equal(t, commonv1.ErrorReason_ERROR_REASON_AUDIT_UNAVAILABLE, reasonOf(err))
		require.Nil(t, c, "no credential")

		c, err = f.resolve(open, tok, "datatable://main?as=viewer")
		require.NoError(t, err, "--audit-fail-open=credential: answered, the failure logged")
		require.NotEmpty(t, c.GetPassword())
	})
}
