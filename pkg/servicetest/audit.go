package servicetest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
)

// BreakAudit makes every write of the audit trail in database dsn fail (a trigger refuses
// each insert into audit_event), as a full disk or a lost grant would, until the returned
// function (also run at cleanup) removes it. Deterministic, unlike a lock or a timeout: the
// fail-closed tests need the write to fail every time, at once.
func BreakAudit(t testing.TB, dsn string) (repair func()) {
	t.Helper()
	exec := func(sql string) {
		t.Helper()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`CREATE OR REPLACE FUNCTION test_audit_broken() RETURNS trigger LANGUAGE plpgsql AS
	        $$BEGIN RAISE EXCEPTION 'the audit trail is broken by the test'; END$$;
	      CREATE TRIGGER test_audit_broken BEFORE INSERT ON audit_event FOR EACH ROW EXECUTE FUNCTION test_audit_broken()`)
	done := false
	repair = func() {
		if !done {
			done = true
			exec(`DROP TRIGGER test_audit_broken ON audit_event`)
		}
	}
	t.Cleanup(repair)
	return repair
}

// AuditEvents lists every event req selects, following next_page_token to the end.
func AuditEvents(t testing.TB, ctx context.Context, c auditv1.AuditServiceClient, req *auditv1.ListAuditEventsRequest) []*auditv1.AuditEvent {
	t.Helper()
	page := &auditv1.ListAuditEventsRequest{}
	proto.Merge(page, req) // the caller's request is left as given
	var out []*auditv1.AuditEvent
	for {
		resp, err := c.ListAuditEvents(ctx, page)
		require.NoError(t, err)
		out = append(out, resp.GetEvents()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		page.PageToken = resp.GetNextPageToken()
	}
}
