package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/audit/audittest"
	"github.com/millwright/millwright/services/roleset/internal/api"
)

// served are the services a roleset replica serves: its own (the Register app.go passes to the
// server) and AuditService, which pkg/server adds beside them when auditing is on.
func served() []string {
	return audittest.Services(func(s *grpc.Server) {
		(&api.Server{}).Register(s)
		audit.NewService(nil).Register(s)
	})
}

// Every RPC roleset serves is either recorded or listed as not recorded with a reason, and
// every field that looks like a secret is recorded only as its keyed hash: a new RPC or field
// fails here until someone decides.
func TestAuditRulesAreComplete(t *testing.T) {
	services := served()
	require.Contains(t, services, "millwright.roleset.v1.ConnectionService")
	require.Contains(t, services, "millwright.audit.v1.AuditService")
	audittest.Complete(t, api.AuditRules(), services...)
	audittest.Redacted(t, services...)
}
