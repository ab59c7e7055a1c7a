package app_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	"github.com/millwright/millwright/pkg/validate/validatetest"
	"github.com/millwright/millwright/services/billing/internal/app"
)

// Every workspace, username and email billing takes is refused, when bad, with the same rule as
// in policy and roleset (their TestSharedFieldRules run the same table). Billing used to accept
// "a b!" as a workspace and any 255 characters as an email.
func TestSharedFieldRules(t *testing.T) {
	bases := []proto.Message{
		&billingv1.CheckSeatCapRequest{Change: &billingv1.CheckSeatCapRequest_Member{Member: &billingv1.MemberChange{
			Workspace: "w", Username: "alice", Email: "alice@x", Role: "operator"}}},
		&billingv1.CheckSeatCapRequest{Change: &billingv1.CheckSeatCapRequest_Builder{Builder: &billingv1.BuilderChange{Workspace: "w"}}},
		&billingv1.CheckSeatCapForOperatorBuilderRequest{Workspace: "w"},
	}
	validatetest.Run(t, app.Validators(), []grpc.ServiceDesc{billingv1.BillingService_ServiceDesc, billingv1.EventService_ServiceDesc},
		bases, validatetest.Options{})
}
