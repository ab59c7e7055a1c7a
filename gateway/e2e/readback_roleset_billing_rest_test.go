package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRolesetBillingReadBackOverREST: every read-back RPC of roleset and billing through the
// gateway's routes, on the demo: Get answers what List does, List pages with page_size and
// page_token (a token refused with other filters), a taken CreateRole name answers 409 naming
// the existing role, which its Get reads back; unknown objects are 404; no password is sent.
func TestRolesetBillingReadBackOverREST(t *testing.T) {
	needsStack(t)
	st := StartStack(t)
	admin := st.AdminToken(t)
	secret := st.Token(t, "demo-admin-password")
	get := func(t *testing.T, path string, want int) map[string]any {
		t.Helper()
		code, raw := st.Do(t, "GET", path, admin, nil)
		require.Equal(t, want, code, "%s: %s", path, raw)
		require.NotContains(t, string(raw), secret, "%s answers no password", path)
		var body map[string]any
		require.NoError(t, json.Unmarshal(raw, &body), "%s: %s", path, raw)
		return body
	}
	items := func(body map[string]any, field string) []map[string]any {
		var out []map[string]any
		list, _ := body[field].([]any)
		for _, x := range list {
			out = append(out, x.(map[string]any))
		}
		return out
	}
	badToken := func(t *testing.T, body map[string]any) {
		t.Helper()
		details, _ := body["details"].([]any)
		require.NotEmpty(t, details, "%v", body)
		require.Equal(t, "page_token", details[0].(map[string]any)["metadata"].(map[string]any)["field"], "%v", body)
	}

	t.Run("clusters", func(t *testing.T) {
		list := items(get(t, "/v1/roleset/clusters?page_size=1", http.StatusOK), "clusters")
		require.Len(t, list, 1)
		require.Equal(t, "local", list[0]["cluster_id"])
		one := get(t, "/v1/roleset/clusters/local", http.StatusOK)
		require.Equal(t, list[0], one["cluster"])
		get(t, "/v1/roleset/clusters/nosuch", http.StatusNotFound)
	})

	t.Run("roles", func(t *testing.T) {
		q := url.Values{"page_size": {"1"}, "enabled": {"true"}, "name_prefix": {"sales_"}}
		var names []string
		var firstToken string
		for {
			body := get(t, "/v1/roleset/clusters/local/roles?"+q.Encode(), http.StatusOK)
			page := items(body, "roles")
			require.Len(t, page, 1)
			names = append(names, page[0]["name"].(string))
			one := get(t, "/v1/roleset/roles/"+page[0]["role_id"].(string), http.StatusOK)
			require.Equal(t, page[0], one["role"])
			next, _ := body["next_page_token"].(string)
			if next == "" {
				break
			}
			if firstToken == "" {
				firstToken = next
			}
			q.Set("page_token", next)
		}
		require.Equal(t, []string{"sales_all", "sales_apac", "sales_emea"}, names)
		badToken(t, get(t, "/v1/roleset/clusters/local/roles?name_prefix=sales_e&page_token="+firstToken, http.StatusBadRequest))
		get(t, "/v1/roleset/roles/999999", http.StatusNotFound)
	})

	t.Run("a taken role name names the role", func(t *testing.T) {
		code, body := st.DoJSON(t, "POST", "/v1/roleset/clusters/local/roles", admin, map[string]any{"name": "sales_emea"})
		require.Equal(t, http.StatusConflict, code, "%v", body)
		details, _ := body["details"].([]any)
		require.NotEmpty(t, details, "%v", body)
		info := details[0].(map[string]any)
		require.Equal(t, "ERROR_REASON_ALREADY_EXISTS", info["reason"])
		md := info["metadata"].(map[string]any)
		require.Equal(t, "role", md["kind"])
		role := get(t, "/v1/roleset/roles/"+md["existing"].(string), http.StatusOK)["role"].(map[string]any)
		require.Equal(t, "sales_emea", role["name"])
	})

	t.Run("data tables", func(t *testing.T) {
		list := items(get(t, "/v1/roleset/workspaces/demo/datatables", http.StatusOK), "datatables")
		var names []string
		for _, d := range list {
			names = append(names, d["name"].(string))
			one := get(t, "/v1/roleset/workspaces/demo/datatables/"+d["name"].(string), http.StatusOK)
			require.Equal(t, d, one["datatable"])
		}
		require.Equal(t, []string{"ledger", "main"}, names)
		first := get(t, "/v1/roleset/workspaces/demo/datatables?page_size=1", http.StatusOK)
		require.Len(t, items(first, "datatables"), 1)
		badToken(t, get(t, "/v1/roleset/workspaces/demo/datatables?cluster_id=local&page_token="+first["next_page_token"].(string),
			http.StatusBadRequest))
		for _, d := range items(get(t, "/v1/roleset/workspaces/demo/datatables?credential_mode=CREDENTIAL_MODE_PROXY", http.StatusOK), "datatables") {
			require.Equal(t, "CREDENTIAL_MODE_PROXY", d["credential_mode"])
		}
		require.Empty(t, items(get(t, "/v1/roleset/workspaces/nosuch/datatables", http.StatusOK), "datatables"))
		get(t, "/v1/roleset/workspaces/demo/datatables/nosuch", http.StatusNotFound)
	})

	t.Run("usage reports", func(t *testing.T) {
		code, body := st.DoJSON(t, "POST", "/v1/billing/reports", admin, map[string]any{})
		require.Equal(t, http.StatusOK, code, "%v", body)
		report := body["report"].(map[string]any)
		one := get(t, "/v1/billing/reports/"+report["id"].(string), http.StatusOK)
		require.Equal(t, report, one["report"])
		newest := items(get(t, "/v1/billing/reports?page_size=1", http.StatusOK), "reports")
		require.Equal(t, []map[string]any{report}, newest)
		get(t, "/v1/billing/reports/999999", http.StatusNotFound)
		badToken(t, get(t, "/v1/billing/reports?page_token=zzz", http.StatusBadRequest))
	})
}
