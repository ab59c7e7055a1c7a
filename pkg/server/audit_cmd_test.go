package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/cli"
	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/pkg/server"
)

// TestAuditCommand: `<service> audit verify` passes on an intact trail and names the edited
// event after a hand edit (exit 1); `audit export` writes one JSON line per event.
func TestAuditCommand(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t, "server_audit", pgtest.Migrations(fstest.MapFS{}))
	pool := pgtest.Pool(t, dsn)
	rec := audit.NewRecorder(audit.Config{Store: audit.NewStore(pool), Service: "policy", Window: -1})
	for _, ws := range []string{"a", "b", "c"} {
		require.NoError(t, rec.Record(ctx, audit.Event{RPC: "/x/Y", Class: audit.Settings, Outcome: audit.Granted, Workspace: ws}))
	}
	rec.Close()
	t.Setenv("DATABASE_URL", dsn) // a password is refused on the command line
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := server.AuditCommand(ctx, "policy", args, &out)
		return out.String(), err
	}
	out, err := run("verify")
	require.NoError(t, err)
	assert.Contains(t, out, "ok, 3 events")

	out, err = run("export")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[1], `"workspace":"b"`)
	assert.Contains(t, lines[1], `"hash":"`)

	_, err = pool.Exec(ctx, `UPDATE audit_event SET body = replace(body, '"b"', '"z"') WHERE seq = 2`)
	require.NoError(t, err)
	_, err = run("verify")
	require.ErrorContains(t, err, "event 2")

	_, err = run("frobnicate")
	var usage *cli.UsageError
	require.ErrorAs(t, err, &usage)
}

// TestAuditConfigRefusesUnknowns: a fail-open class the trail does not know, or a short key,
// stops the service at start instead of being ignored.
func TestAuditConfigRefusesUnknowns(t *testing.T) {
	_, err := server.AuditConfig{FailOpen: "operator,everything"}.NewRecorder("policy", nil, nil)
	require.ErrorContains(t, err, `unknown class "everything"`)
	_, err = server.AuditConfig{Key: "short"}.NewRecorder("policy", nil, nil)
	require.ErrorContains(t, err, "at least 32 bytes")
}
