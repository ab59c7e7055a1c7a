package e2e

// This file replays the operator-builder fixtures (services/policy/internal/builder/testdata)
// over REST through the real gateway of a real stack, and over gRPC against the same stack's
// policy service, and requires both to match the fixture and each other. Reading the fixtures and
// checking answers is pkg/builderfixture, shared with services/policy/internal/api.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	bf "github.com/millwright/millwright/pkg/builderfixture"
	"github.com/millwright/millwright/pkg/errs"
)

const fixtureDir = "../../services/policy/internal/builder/testdata"

// restCall posts the case's request to the stack's gateway as REST clients do (protojson, the
// documents as JSON strings), with token acting for the case's caller (on_behalf_of).
func restCall(t *testing.T, stack *Stack, token string, c bf.Case) bf.Outcome {
	t.Helper()
	req, route := bf.Request(c)
	require.NotNil(t, req, "unknown rpc %q", c.RPC)
	code, raw := stack.Do(t, http.MethodPost, route, token, req)
	if code == http.StatusOK {
		msg := bf.ResponseFor(req)
		require.NoError(t, protojson.Unmarshal(raw, msg), string(raw))
		o := bf.OutcomeOf(msg)
		o.Code, o.Violations = "OK", []bf.Violation{}
		return o
	}
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type     string            `json:"@type"`
			Reason   string            `json:"reason"`
			Domain   string            `json:"domain"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	require.NoError(t, json.Unmarshal(raw, &st), string(raw))
	o := bf.Outcome{Code: bf.CodeName(codes.Code(st.Code)), Violations: []bf.Violation{}}
	for _, d := range st.Details {
		if d.Type != "type.googleapis.com/google.rpc.ErrorInfo" || d.Domain != errs.Domain {
			continue
		}
		o.Violations = append(o.Violations, bf.Violation{Reason: strings.TrimPrefix(d.Reason, "ERROR_REASON_"), Doc: d.Metadata["doc"], Pointer: d.Metadata["pointer"]})
	}
	return o
}

func TestBuilderFixturesREST(t *testing.T) {
	needsStack(t)
	sf, cases := bf.Load(t, fixtureDir)
	st := StartStack(t)
	conn, err := grpc.NewClient(st.Policy, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	token := st.AdminToken(t)
	// gRPC straight to policy and REST through the gateway, both as the superadmin.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	// The stack loads a demo with a small licensed seat cap; these workspaces need more seats.
	code, raw := st.Do(t, http.MethodPut, "/v1/billing/cap", token, map[string]any{"seats": "0"})
	require.Equal(t, http.StatusOK, code, string(raw))
	bf.Apply(t, ctx, conn, sf.Setup)
	require.Greater(t, len(cases), 100)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := restCall(t, st, token, c)
			bf.Check(t, c, r)
			g := bf.Call(t, ctx, conn, c)
			g.CodeFindings, r.CodeFindings = bf.OrNone(g.CodeFindings), bf.OrNone(r.CodeFindings)
			assert.Equal(t, g, r, "REST and gRPC must reach the same decision")
		})
	}
}
