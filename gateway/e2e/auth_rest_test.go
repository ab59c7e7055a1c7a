package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPolicyAuthOverREST proves the authentication and input rules of the policy service hold
// on the REST surface too, through the real gateway: no token is 401, a token of workspace A
// used on workspace B is 403 WRONG_WORKSPACE, bad input is 400 naming the field, and nothing is
// written by a refused call.
func TestPolicyAuthOverREST(t *testing.T) {
	needsStack(t)
	st := StartStack(t)
	admin := st.AdminToken(t)

	reasonOf := func(body map[string]any) string {
		details, _ := body["details"].([]any)
		for _, d := range details {
			if m, ok := d.(map[string]any); ok && m["reason"] != nil {
				return m["reason"].(string)
			}
		}
		return ""
	}

	for _, w := range []string{"resta", "restb"} {
		code, body := st.DoJSON(t, "POST", "/v1/workspaces", admin, map[string]any{
			"workspace": w, "name": w, "admin_email": "boss-" + w + "@x.test", "admin_username": "boss"})
		require.Equal(t, http.StatusOK, code, "%v", body)
	}
	code, body := st.DoJSON(t, "POST", "/v1/workspaces/resta/tokens", admin, map[string]any{
		"username": "boss", "scopes": []string{"workspace:read"}, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	require.Equal(t, http.StatusOK, code, "%v", body)
	tokenA, _ := body["token"].(string)
	require.NotEmpty(t, tokenA)

	t.Run("no token", func(t *testing.T) {
		code, body := st.DoJSON(t, "GET", "/v1/workspaces/resta/operator-settings", "", nil)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Equal(t, "ERROR_REASON_UNAUTHENTICATED", reasonOf(body))
	})
	t.Run("garbage token", func(t *testing.T) {
		code, body := st.DoJSON(t, "GET", "/v1/workspaces/resta/operator-settings", "mwu_not-a-token", nil)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Equal(t, "ERROR_REASON_UNAUTHENTICATED", reasonOf(body))
	})
	t.Run("token of A on B", func(t *testing.T) {
		code, body := st.DoJSON(t, "GET", "/v1/workspaces/restb/operator-settings", tokenA, nil)
		require.Equal(t, http.StatusForbidden, code)
		require.Equal(t, "ERROR_REASON_WRONG_WORKSPACE", reasonOf(body))
	})
	t.Run("token of A on A", func(t *testing.T) {
		code, body := st.DoJSON(t, "GET", "/v1/workspaces/resta/operator-settings", tokenA, nil)
		require.Equal(t, http.StatusOK, code, "%v", body)
	})
	t.Run("missing scope", func(t *testing.T) {
		code, body := st.DoJSON(t, "PATCH", "/v1/workspaces/resta/operator-settings", tokenA,
			map[string]any{"patch": map[string]any{"manage_schedules": false}})
		require.Equal(t, http.StatusForbidden, code, "%v", body)
		require.Equal(t, "ERROR_REASON_MISSING_SCOPE", reasonOf(body))
	})
	t.Run("bad input names the field and writes nothing", func(t *testing.T) {
		code, body := st.DoJSON(t, "POST", "/v1/workspaces/resta/members", admin, map[string]any{
			"username": "not a name!", "email": "x@x.test", "role": "ROLE_DEVELOPER"})
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, "ERROR_REASON_INVALID_FIELD", reasonOf(body))
		require.Contains(t, body["message"], "username")
		code, _ = st.DoJSON(t, "POST", "/v1/workspaces/resta/tenancy:resolve", admin, map[string]any{"email": "x@x.test"})
		require.Equal(t, http.StatusNotFound, code, "the refused member must not exist")
	})
}
