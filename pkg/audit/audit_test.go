package audit_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	"github.com/millwright/millwright/pkg/errs"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/validate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newTrail returns a fresh database with the trail's schema (pkg/migrate adds it to every
// service's migrations) and a pool on it.
func newTrail(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := pgtest.NewDatabase(t, "audit_test", pgtest.Migrations(fstest.MapFS{}))
	return dsn, pgtest.Pool(t, dsn)
}

func newRecorder(t *testing.T, pool *pgxpool.Pool, cfg audit.Config) *audit.Recorder {
	t.Helper()
	cfg.Store, cfg.Service = audit.NewStore(pool), "policy"
	if cfg.Replica == "" {
		cfg.Replica = "r1"
	}
	r := audit.NewRecorder(cfg)
	t.Cleanup(r.Close)
	return r
}

func event(i int) audit.Event {
	return audit.Event{RPC: "/x.v1.S/Check", Class: audit.Builder, Outcome: audit.Refused, Code: "PermissionDenied",
		Rule: "ERROR_REASON_INLINE_CODE", Pointer: fmt.Sprintf("/value/modules/%d", i), ActorKind: "user", Actor: "olive",
		Workspace: "demo", Object: fmt.Sprintf("path=f/flow%d", i), Details: map[string]string{"n": fmt.Sprint(i)}}
}

func TestChainVerifiesAndLists(t *testing.T) {
	_, pool := newTrail(t)
	rec := newRecorder(t, pool, audit.Config{Window: -1})
	ctx := context.Background()
	for i := range 5 {
		require.NoError(t, rec.Record(ctx, event(i)))
	}
	v, err := rec.Store().Verify(ctx)
	require.NoError(t, err)
	assert.Equal(t, audit.Verdict{OK: true, Checked: 5}, v)

	got, err := rec.Store().List(ctx, audit.Filter{Object: "flow3"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, int64(4), got[0].Seq)
	assert.Equal(t, "/value/modules/3", got[0].Pointer)
	assert.Equal(t, "r1", got[0].Replica)
	assert.Equal(t, got[0].Hash, audit.ChainHash(got[0].PrevHash, got[0].Body()), "the stored hash is the body's")
}

// TestVerifyFindsTampering edits the trail the way an intruder with database access would,
// with psql, and checks that Verify names the first event touched.
func TestVerifyFindsTampering(t *testing.T) {
	cases := []struct {
		name    string
		sql     string
		badSeq  int64
		problem string
	}{
		{"body edited", `UPDATE audit_event SET body = replace(body, '"refused"', '"granted"') WHERE seq = 3`, 3, "edited"},
		{"column edited", `UPDATE audit_event SET outcome = 'granted' WHERE seq = 2`, 2, "columns"},
		{"body and hash rewritten", `UPDATE audit_event SET actor = 'alice', body = replace(body, 'olive', 'alice'), hash = sha256(prev_hash || convert_to(replace(body, 'olive', 'alice'), 'UTF8')) WHERE seq = 2`, 3, "prev_hash"},
		{"event deleted", `DELETE FROM audit_event WHERE seq = 3`, 3, "missing"},
		{"last event deleted", `DELETE FROM audit_event WHERE seq = 5`, 5, "missing"},
		{"events reordered", `UPDATE audit_event SET seq = -seq WHERE seq IN (2, 4); UPDATE audit_event SET seq = CASE seq WHEN -2 THEN 4 ELSE 2 END WHERE seq < 0`, 2, "prev_hash"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dsn, pool := newTrail(t)
			rec := newRecorder(t, pool, audit.Config{Window: -1})
			ctx := context.Background()
			for i := range 5 {
				require.NoError(t, rec.Record(ctx, event(i)))
			}
			out, err := exec.Command(pgtest.Binary(t, "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-c", tc.sql, dsn).CombinedOutput()
			require.NoError(t, err, string(out))
			v, err := rec.Store().Verify(ctx)
			require.NoError(t, err)
			assert.False(t, v.OK)
			assert.Equal(t, tc.badSeq, v.FirstBadSeq, v.Problem)
			assert.Contains(t, v.Problem, tc.problem)
		})
	}
}

// TestReplicasShareOneChain: two recorders (two replicas) appending at once leave one chain,
// without gaps, that verifies.
func TestReplicasShareOneChain(t *testing.T) {
	_, pool := newTrail(t)
	a := newRecorder(t, pool, audit.Config{Window: -1, Replica: "a"})
	b := newRecorder(t, pool, audit.Config{Window: -1, Replica: "b"})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := a
			if i%2 == 1 {
				r = b
			}
			assert.NoError(t, r.Record(ctx, event(i)))
		}()
	}
	wg.Wait()
	v, err := a.Store().Verify(ctx)
	require.NoError(t, err)
	assert.Equal(t, audit.Verdict{OK: true, Checked: 40}, v)
}

// TestRepeatWindow: identical decisions within the window are written once, then as one event
// with their count when the window ends; a different decision is written at once.
func TestRepeatWindow(t *testing.T) {
	_, pool := newTrail(t)
	var now atomic.Int64
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now.Store(start.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	rec := newRecorder(t, pool, audit.WithClock(audit.Config{Window: time.Hour}, clock))
	ctx := context.Background()
	for range 5 {
		require.NoError(t, rec.Record(ctx, event(1)))
		now.Add(int64(time.Second))
	}
	require.NoError(t, rec.Record(ctx, event(2)))
	got, err := rec.Store().List(ctx, audit.Filter{})
	require.NoError(t, err)
	require.Len(t, got, 2, "one event per distinct decision, before the window ends")
	assert.Equal(t, int64(1), got[0].Count)

	rec.Close() // writes the counted repeats
	got, err = rec.Store().List(ctx, audit.Filter{Object: "flow1"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, int64(4), got[1].Count, "the four repeats")
	assert.Equal(t, start.Add(time.Second), got[1].Time)
	assert.Equal(t, start.Add(4*time.Second), got[1].LastTime)
	v, err := rec.Store().Verify(ctx)
	require.NoError(t, err)
	assert.True(t, v.OK, v.Problem)
}

// TestPruneKeepsTheChainVerifiable: retention removes a prefix and moves the anchor, so the
// rest still verifies; an old event after a young one waits.
func TestPruneKeepsTheChainVerifiable(t *testing.T) {
	_, pool := newTrail(t)
	rec := newRecorder(t, pool, audit.Config{Window: -1})
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, day := range []int{1, 2, 3, 10, 4, 11} { // the 5th is older than the 4th
		e := event(i)
		e.Time = base.AddDate(0, 0, day)
		require.NoError(t, rec.Record(ctx, e))
	}
	n, err := rec.Store().Prune(ctx, base.AddDate(0, 0, 5), 2)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "at most limit per call")
	n, err = rec.Store().Prune(ctx, base.AddDate(0, 0, 5), 100)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the day-4 event waits behind the day-10 one")
	v, err := rec.Store().Verify(ctx)
	require.NoError(t, err)
	assert.Equal(t, audit.Verdict{OK: true, Checked: 3}, v)
}

// failWrites makes every insert into the trail fail.
func failWrites(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `ALTER TABLE audit_event ADD CONSTRAINT test_no_writes CHECK (false) NOT VALID`)
	require.NoError(t, err)
}

// TestInterceptorFailsClosed: when the trail cannot be written, a fail-closed decision's answer
// is withheld, a fail-closed change is not made, and a fail-open decision is answered.
func TestInterceptorFailsClosed(t *testing.T) {
	_, pool := newTrail(t)
	rec := newRecorder(t, pool, audit.Config{Window: -1, FailOpen: map[audit.Class]bool{audit.Operator: true}})
	failWrites(t, pool)
	a := &audit.Interceptor{Recorder: rec, Rules: audit.Rules{
		"/t/Issue":  audit.Decision(audit.Credential),
		"/t/Set":    audit.Mutation(audit.Settings),
		"/t/Check":  audit.Decision(audit.Operator),
		"/t/Read":   audit.NotAudited("a read"),
		"/t/Change": audit.Mutation(audit.Operator),
	}}
	ctx := auth.WithIdentity(context.Background(), auth.Identity{Kind: auth.User, Username: "alice", Workspace: "demo"})
	for _, tc := range []struct {
		method  string
		refused bool
		ran     bool
	}{
		{"/t/Issue", true, true}, // decided, but the credential is not handed out
		{"/t/Set", true, false},  // not made at all
		{"/t/Check", false, true},
		{"/t/Read", false, true},
		{"/t/Change", false, true}, // fail-open class: made, failure logged
		{"/t/Unlisted", true, false},
	} {
		t.Run(tc.method, func(t *testing.T) {
			ran := false
			resp, err := a.Unary(ctx, &policyv1.GetOperatorSettingsRequest{Workspace: "demo"}, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { ran = true; return "answer", nil })
			assert.Equal(t, tc.ran, ran, "handler ran")
			if !tc.refused {
				require.NoError(t, err)
				assert.Equal(t, "answer", resp)
				return
			}
			assert.Nil(t, resp)
			assert.Equal(t, codes.Unavailable, status.Code(err))
			r, _ := errs.Reason(err)
			assert.Equal(t, commonv1.ErrorReason_ERROR_REASON_AUDIT_UNAVAILABLE, r)
		})
	}
}

// TestInterceptorRecordsTheCall: the event of a refused call names the actor, the rule and
// pointer of the refusal, the request's object; a secret field is only its keyed hash.
func TestInterceptorRecordsTheCall(t *testing.T) {
	_, pool := newTrail(t)
	h, err := audit.NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	rec := newRecorder(t, pool, audit.Config{Window: -1, Hasher: h})
	a := &audit.Interceptor{Recorder: rec, Rules: audit.Rules{"/t/Resolve": audit.Decision(audit.Credential)}}
	ctx := auth.WithIdentity(context.Background(), auth.Identity{Kind: auth.Service, TokenID: "static:service"})
	refusal := errs.WithDetails(codes.PermissionDenied, "no", []errs.Detail{{Reason: commonv1.ErrorReason_ERROR_REASON_VIEWER_ACCESS_OFF, Pointer: "/reference"}})
	_, err = a.Unary(ctx, &policyv1.GetRunIdentityRequest{JobToken: "jt_secret_value"}, &grpc.UnaryServerInfo{FullMethod: "/t/Resolve"},
		func(ctx context.Context, _ any) (any, error) {
			audit.Note(ctx, "login", "wm_set_abc")
			return nil, refusal
		})
	require.Error(t, err)
	got, err := rec.Store().List(context.Background(), audit.Filter{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	e := got[0]
	assert.Equal(t, audit.Refused, e.Outcome)
	assert.Equal(t, "ERROR_REASON_VIEWER_ACCESS_OFF", e.Rule)
	assert.Equal(t, "/reference", e.Pointer)
	assert.Equal(t, "service", e.ActorKind)
	assert.Equal(t, "static:service", e.Actor)
	assert.Equal(t, "wm_set_abc", e.Details["login"])
	assert.Equal(t, h.Hash("jt_secret_value"), e.Details["job_token"])
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_event WHERE strpos(body, 'jt_secret_value') > 0`).Scan(&n))
	assert.Zero(t, n, "the secret is nowhere in the trail")
}

// TestLargeAndUnknownInput: a request's large field is recorded as its length and SHA-256, not
// its text (a 1 MiB flow costs one hash, and the trail stays small), and a filter naming an
// outcome or class the trail does not know is refused with the field, not matched as nothing.
func TestLargeAndUnknownInput(t *testing.T) {
	_, pool := newTrail(t)
	rec := newRecorder(t, pool, audit.Config{Window: -1})
	a := &audit.Interceptor{Recorder: rec, Rules: audit.Rules{"/t/CheckFlow": audit.Decision(audit.Builder)}}
	ctx := auth.WithIdentity(context.Background(), auth.Identity{Kind: auth.User, Username: "olive", Workspace: "demo"})
	flow := `{"modules": [` + strings.Repeat(`{"id": "x"},`, 100_000) + `{"id": "y"}]}`
	_, err := a.Unary(ctx, &policyv1.CheckFlowRequest{Workspace: "demo", OnBehalfOf: "u/olive", FlowJson: flow},
		&grpc.UnaryServerInfo{FullMethod: "/t/CheckFlow"}, func(context.Context, any) (any, error) { return "ok", nil })
	require.NoError(t, err)
	got, err := rec.Store().List(context.Background(), audit.Filter{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	sum := sha256.Sum256([]byte(flow))
	assert.Equal(t, fmt.Sprintf("sha256:%x len=%d", sum, len(flow)), got[0].Details["flow_json"])
	assert.Equal(t, "u/olive", got[0].OnBehalfOf)
	assert.Less(t, len(got[0].Body()), 1024, "the event stays small whatever the request's size")

	reg := validate.NewRegistry()
	audit.Validators(reg)
	for field, req := range map[string]*auditv1.ListAuditEventsRequest{
		"outcome":    {Outcome: "maybe"},
		"class":      {Class: "everything"},
		"page_size":  {PageSize: 5000},
		"page_token": {PageToken: "-1; DROP TABLE audit_event"},
	} {
		err := reg.Validate(req)
		require.Equal(t, codes.InvalidArgument, status.Code(err), field)
		var fields []string
		for _, info := range errs.Infos(err) {
			fields = append(fields, info.GetMetadata()["field"])
		}
		assert.Contains(t, fields, field)
	}
}
