package e2e

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/servicetest"
)

// TestAuditFailsClosedOverREST: over the real stack, with policy's audit trail broken, a
// settings change through the gateway is refused (503, AUDIT_UNAVAILABLE) and not made; once
// the trail is repaired the same call succeeds.
func TestAuditFailsClosedOverREST(t *testing.T) {
	needsStack(t)
	st := StartStack(t)
	admin := st.AdminToken(t)
	code, body := st.DoJSON(t, "POST", "/v1/workspaces", admin, map[string]any{"workspace": "auditws", "name": "Audit",
		"admin_email": "auditboss@x.test", "admin_username": "auditboss"})
	require.Equal(t, http.StatusOK, code, "%v", body)
	hidden := map[string]any{"patch": map[string]any{"runs": false}}
	runs := func() any {
		code, body := st.DoJSON(t, "GET", "/v1/workspaces/auditws/operator-settings", admin, nil)
		require.Equal(t, http.StatusOK, code, "%v", body)
		settings, _ := body["settings"].(map[string]any)
		return settings["runs"]
	}

	repair := servicetest.BreakAudit(t, st.SuperuserURL(t, "millwright_policy"))
	code, body = st.DoJSON(t, "PATCH", "/v1/workspaces/auditws/operator-settings", admin, hidden)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)
	details, _ := body["details"].([]any)
	require.NotEmpty(t, details, "%v", body)
	require.Equal(t, "ERROR_REASON_AUDIT_UNAVAILABLE", details[0].(map[string]any)["reason"])
	require.Equal(t, true, runs(), "the refused change is not made")

	repair()
	code, body = st.DoJSON(t, "PATCH", "/v1/workspaces/auditws/operator-settings", admin, hidden)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.NotEqual(t, true, runs())
}
