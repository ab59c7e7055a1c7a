package e2e

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPolicyReadBackOverREST: the read-back RPCs of policy through the gateway (issue 17), on
// the demo workspace: a List paged by next_page_token to the end, a Get of each kind, a
// catalog path with slashes in the URL, and a bad page token answered 400 naming the field.
func TestPolicyReadBackOverREST(t *testing.T) {
	needsStack(t)
	st := StartStack(t)
	admin := st.AdminToken(t)
	get := func(path string) map[string]any {
		t.Helper()
		code, body := st.DoJSON(t, "GET", path, admin, nil)
		require.Equal(t, http.StatusOK, code, "%s: %v", path, body)
		return body
	}

	var members []any
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20, "paging does not end")
		body := get("/v1/workspaces/demo/members?page_size=2&page_token=" + url.QueryEscape(token))
		page, _ := body["members"].([]any)
		require.LessOrEqual(t, len(page), 2)
		members = append(members, page...)
		token, _ = body["next_page_token"].(string)
		if token == "" {
			break
		}
	}
	all, _ := get("/v1/workspaces/demo/members")["members"].([]any)
	require.Equal(t, all, members, "pages of 2 read the same members as one page")
	require.GreaterOrEqual(t, len(all), 4)

	ws, _ := get("/v1/workspaces/demo")["workspace"].(map[string]any)
	require.Equal(t, "demo", ws["workspace"])
	m, _ := get("/v1/workspaces/demo/members/alice")["member"].(map[string]any)
	require.Equal(t, "ROLE_OPERATOR", m["role"])
	g, _ := get("/v1/workspaces/demo/groups/emea")["group"].(map[string]any)
	require.Contains(t, g["members"], "alice")
	f, _ := get("/v1/workspaces/demo/folders/sales")["folder"].(map[string]any)
	require.Equal(t, []any{"u/devon"}, f["writers"])
	r, _ := get("/v1/workspaces/demo/runnables/f/sales/daily_report?kind=RUNNABLE_KIND_FLOW")["runnable"].(map[string]any)
	require.Equal(t, "f/sales/daily_report", r["path"])
	hashes, _ := get("/v1/workspaces/demo/script_versions?path=f%2Ffinance%2Fpayroll")["hashes"].([]any)
	require.Contains(t, hashes, "c1b2c3d4e5f60718")
	require.NotEmpty(t, get("/v1/workspaces/demo/tokens")["tokens"])
	_, hasRuns := get("/v1/workspaces/demo/runs?page_size=1")["runs"]
	require.True(t, hasRuns, "the demo records a run")
	wss, _ := get("/v1/workspaces")["workspaces"].([]any)
	require.NotEmpty(t, wss)

	code, body := st.DoJSON(t, "GET", "/v1/workspaces/demo/members?page_token=forged", admin, nil)
	require.Equal(t, http.StatusBadRequest, code, "%v", body)
	details, _ := body["details"].([]any)
	require.NotEmpty(t, details)
	info, _ := details[0].(map[string]any)
	md, _ := info["metadata"].(map[string]any)
	require.Equal(t, "page_token", md["field"])
	code, body = st.DoJSON(t, "GET", "/v1/workspaces/demo/runnables/f/sales/nope?kind=RUNNABLE_KIND_FLOW", admin, nil)
	require.Equal(t, http.StatusNotFound, code, "%v", body)

	// A client sending flow_json as a JSON object (not the string holding it) gets the form of
	// every other refusal: 400, INVALID_FIELD, the field and the expected form.
	code, body = st.DoJSON(t, "POST", "/v1/workspaces/demo/builder/flows:check", admin,
		map[string]any{"on_behalf_of": "alice", "action": "FLOW_ACTION_SAVE", "flow_json": map[string]any{"value": map[string]any{}}})
	require.Equal(t, http.StatusBadRequest, code, "%v", body)
	details, _ = body["details"].([]any)
	require.NotEmpty(t, details)
	info, _ = details[0].(map[string]any)
	require.Equal(t, "ERROR_REASON_INVALID_FIELD", info["reason"])
	md, _ = info["metadata"].(map[string]any)
	require.Equal(t, "flow_json", md["field"])
	require.Contains(t, body["message"], "must be a JSON string holding the document")
}
