package e2e

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSeatCapRefusalOverREST is billing's cap refusal end to end through the gateway: turning
// operator builder rights on when that would go over the licensed cap answers 409 with the
// numbers, and commits nothing; under a cap that fits, the same call succeeds.
func TestSeatCapRefusalOverREST(t *testing.T) {
	needsStack(t)
	st := StartStack(t)
	admin := st.AdminToken(t)
	seats := func() int64 {
		code, body := st.DoJSON(t, "GET", "/v1/billing/seats", admin, nil)
		require.Equal(t, http.StatusOK, code, "%v", body)
		usage, _ := body["usage"].(map[string]any)
		m, _ := strconv.ParseInt(usage["milliseats"].(string), 10, 64)
		return m
	}

	before := seats()
	code, body := st.DoJSON(t, "POST", "/v1/workspaces", admin, map[string]any{"workspace": "capws", "name": "Cap",
		"admin_email": "capboss@x.test", "admin_username": "capboss"})
	require.Equal(t, http.StatusOK, code, "%v", body)
	for _, u := range []string{"capop1", "capop2"} {
		code, body := st.DoJSON(t, "POST", "/v1/workspaces/capws/members", admin, map[string]any{
			"username": u, "email": u + "@x.test", "role": "ROLE_OPERATOR"})
		require.Equal(t, http.StatusOK, code, "%v", body)
	}
	// capboss is a new author (1 seat), the two operators half a seat each.
	want := before + 2000
	require.Eventually(t, func() bool { return seats() == want }, 20*time.Second, 50*time.Millisecond,
		"billing did not follow policy's stream")
	require.Zero(t, want%1000, "the test needs a whole number of seats to set the cap at")
	capSeats := want / 1000

	code, body = st.DoJSON(t, "PUT", "/v1/billing/cap", admin, map[string]any{"seats": capSeats})
	require.Equal(t, http.StatusOK, code, "%v", body)

	enable := map[string]any{"patch": map[string]any{"builder": true}}
	code, body = st.DoJSON(t, "PATCH", "/v1/workspaces/capws/operator-settings", admin, enable)
	require.Equal(t, http.StatusConflict, code, "%v", body)
	details, _ := body["details"].([]any)
	require.NotEmpty(t, details)
	info := details[0].(map[string]any)
	require.Equal(t, "ERROR_REASON_SEAT_CAP_EXCEEDED", info["reason"])
	require.Equal(t, map[string]any{
		"before": strconv.FormatInt(capSeats, 10),
		"after":  strconv.FormatInt(capSeats+1, 10), // each operator now costs a full seat
		"cap":    strconv.FormatInt(capSeats, 10),
	}, info["metadata"])

	code, body = st.DoJSON(t, "GET", "/v1/workspaces/capws/operator-settings", admin, nil)
	require.Equal(t, http.StatusOK, code, "%v", body)
	settings, _ := body["settings"].(map[string]any)
	require.NotEqual(t, true, settings["builder"], "the refused change must not be committed")

	code, body = st.DoJSON(t, "PUT", "/v1/billing/cap", admin, map[string]any{"seats": capSeats + 1})
	require.Equal(t, http.StatusOK, code, "%v", body)
	code, body = st.DoJSON(t, "PATCH", "/v1/workspaces/capws/operator-settings", admin, enable)
	require.Equal(t, http.StatusOK, code, "%v", body)
}
