package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/auth"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
)

var superadmin = auth.WithIdentity(context.Background(), auth.Identity{Kind: auth.Superadmin, Username: "superadmin"})

// TestServiceListsPagesAndRefuses: the trail pages oldest first with its filters, answers only
// the superadmin, and only for its own service.
func TestServiceListsPagesAndRefuses(t *testing.T) {
	_, pool := newTrail(t)
	h, err := audit.NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	rec := newRecorder(t, pool, audit.Config{Window: -1, Hasher: h})
	for i := range 7 {
		e := event(i)
		if i%2 == 0 {
			e.Workspace = "other"
		}
		require.NoError(t, rec.Record(context.Background(), e))
	}
	s := audit.NewService(rec)
	var seqs []int64
	token := ""
	for range 10 {
		resp, err := s.ListAuditEvents(superadmin, &auditv1.ListAuditEventsRequest{Workspace: "demo", PageSize: 2, PageToken: token})
		require.NoError(t, err)
		for _, e := range resp.GetEvents() {
			seqs = append(seqs, e.GetSeq())
			assert.Equal(t, "demo", e.GetWorkspace())
			assert.Len(t, e.GetHash(), 64)
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	assert.Equal(t, []int64{2, 4, 6}, seqs)

	resp, err := s.ListAuditEvents(superadmin, &auditv1.ListAuditEventsRequest{Outcome: audit.Granted})
	require.NoError(t, err)
	assert.Empty(t, resp.GetEvents())

	hash, err := s.HashAuditValue(superadmin, &auditv1.HashAuditValueRequest{Value: "mwu_x"})
	require.NoError(t, err)
	assert.Equal(t, h.Hash("mwu_x"), hash.GetHash())

	user := auth.WithIdentity(context.Background(), auth.Identity{Kind: auth.User, Username: "ada", Workspace: "demo"})
	_, err = s.ListAuditEvents(user, &auditv1.ListAuditEventsRequest{})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "a workspace admin does not read the instance's trail")
	_, err = s.VerifyAuditChain(superadmin, &auditv1.VerifyAuditChainRequest{Service: "roleset"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "policy answers for its own trail only")
	v, err := s.VerifyAuditChain(superadmin, &auditv1.VerifyAuditChainRequest{Service: "policy"})
	require.NoError(t, err)
	assert.True(t, v.GetOk())
	assert.Equal(t, int64(7), v.GetChecked())
}

type watchStream struct {
	grpc.ServerStream
	ctx context.Context
	got chan *auditv1.AuditEvent
}

func (w *watchStream) Context() context.Context { return w.ctx }
func (w *watchStream) Send(r *auditv1.WatchAuditEventsResponse) error {
	w.got <- r.GetEvent()
	return nil
}

// TestServiceWatchFollows: a watch from the head sends the events written after it, in order.
func TestServiceWatchFollows(t *testing.T) {
	_, pool := newTrail(t)
	rec := newRecorder(t, pool, audit.Config{Window: -1})
	require.NoError(t, rec.Record(context.Background(), event(0)))
	s := audit.NewService(rec)
	s.WatchPoll = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(superadmin)
	defer cancel()
	w := &watchStream{ctx: ctx, got: make(chan *auditv1.AuditEvent, 10)}
	done := make(chan error, 1)
	go func() { done <- s.WatchAuditEvents(&auditv1.WatchAuditEventsRequest{AfterSeq: -1}, w) }()
	time.Sleep(50 * time.Millisecond) // the watch has read the head
	for i := 1; i <= 3; i++ {
		require.NoError(t, rec.Record(context.Background(), event(i)))
	}
	for i := 1; i <= 3; i++ {
		select {
		case e := <-w.got:
			assert.Equal(t, int64(i+1), e.GetSeq())
			assert.Equal(t, fmt.Sprintf("path=f/flow%d", i), e.GetObject())
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not delivered", i)
		}
	}
	cancel()
	require.NoError(t, <-done)
}
