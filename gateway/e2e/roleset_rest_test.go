package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRolesetRulesOverREST runs the data-table connection rules of the spec through the real
// gateway against the real stack and its demo (policy records the runs, roleset resolves): the
// viewer gets the roles whose tenants name them and a credential; a run with no recorded viewer
// is refused rather than resolved as its owner; a workspace admin viewer never gets admin; a
// named role the owner is no tenant of is refused; a malformed reference is refused, never
// resolved as the default role; an unknown data table is refused.
func TestRolesetRulesOverREST(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack; skipped with -short")
	}
	st := StartStack(t)
	service := st.Token(t, "service-token")

	post := func(path, token string, body any) (int, map[string]any) {
		t.Helper()
		b, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequest("POST", st.HTTP+path, bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
		return resp.StatusCode, out
	}
	// run records a run the way the platform does (service token; the session's own token as
	// the credential when there is one) and returns its job token.
	run := func(origin, owner, credential string) string {
		t.Helper()
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		jobID := hex.EncodeToString(id)
		jobID = jobID[:8] + "-" + jobID[8:12] + "-" + jobID[12:16] + "-" + jobID[16:20] + "-" + jobID[20:]
		body := map[string]any{"job_id": jobID, "permissioned_as": owner, "origin": origin}
		if credential != "" {
			body["credential"] = credential
		}
		code, out := post("/v1/workspaces/demo/runs", service, body)
		require.Equal(t, http.StatusOK, code, "%v", out)
		return out["job_token"].(string)
	}

	adaRun := run("RUN_ORIGIN_DIRECT", "u/ada", st.Token(t, "ada-token"))
	for _, tc := range []struct {
		name, jobToken, ref string
		code                int
		reason              string
		role                string
	}{
		{"viewer alice gets her tenant role", st.Token(t, "job-alice"), "datatable://main?as=viewer", 200, "", "sales_emea"},
		{"viewer bob gets his", st.Token(t, "job-bob"), "datatable://main?as=viewer", 200, "", "sales_apac"},
		{"schedule run: no viewer", run("RUN_ORIGIN_SCHEDULE", "u/alice", ""), "datatable://main?as=viewer", 403, "ERROR_REASON_NO_VIEWER", ""},
		{"trigger run: no viewer", run("RUN_ORIGIN_TRIGGER", "u/alice", ""), "datatable://main?as=viewer", 403, "ERROR_REASON_NO_VIEWER", ""},
		{"AI tool job: no viewer", run("RUN_ORIGIN_AI_TOOL", "u/ada", ""), "datatable://main?as=viewer", 403, "ERROR_REASON_NO_VIEWER", ""},
		{"anonymous app: no viewer, not the publisher", run("RUN_ORIGIN_APP_ANONYMOUS", "u/ada", ""), "datatable://main?as=viewer", 403, "ERROR_REASON_NO_VIEWER", ""},
		{"admin viewer never gets admin", adaRun, "datatable://main?as=viewer", 403, "ERROR_REASON_NO_ROLE", ""},
		{"named role the owner is no tenant of", st.Token(t, "job-alice"), "datatable://main?role=sales_apac", 403, "", ""},
		{"as other than viewer", st.Token(t, "job-alice"), "datatable://main?as=owner", 400, "ERROR_REASON_MALFORMED_REFERENCE", ""},
		{"duplicate key", st.Token(t, "job-alice"), "datatable://main?role=sales_emea&ROLE=sales_emea", 400, "ERROR_REASON_MALFORMED_REFERENCE", ""},
		{"unknown key", st.Token(t, "job-alice"), "datatable://main?as=viewer&mode=x", 400, "ERROR_REASON_MALFORMED_REFERENCE", ""},
		{"role with as", st.Token(t, "job-alice"), "datatable://main?role=sales_emea&as=viewer", 400, "ERROR_REASON_MALFORMED_REFERENCE", ""},
		{"unknown data table", st.Token(t, "job-alice"), "datatable://nope?as=viewer", 404, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := post("/v1/roleset/connections:resolve", tc.jobToken, map[string]any{"reference": tc.ref})
			require.Equal(t, tc.code, code, "%v", out)
			if tc.reason != "" {
				require.Equal(t, tc.reason, reasonIn(out), "%v", out)
			}
			if tc.code != 200 {
				require.NotContains(t, out, "password")
				return
			}
			require.NotEmpty(t, out["password"])
			require.Contains(t, out["roles"], tc.role)
		})
	}
}

func reasonIn(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		if m, ok := d.(map[string]any); ok && m["reason"] != nil {
			return m["reason"].(string)
		}
	}
	return ""
}
