package api

import (
	"github.com/millwright/millwright/pkg/audit"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
)

// AuditRules is what the audit trail records of every RPC billing serves (docs/billing.md,
// "Audit trail"). The completeness test (internal/app) walks the services the app registers,
// so a new RPC fails it until it is listed here.
func AuditRules() audit.Rules {
	read := audit.NotAudited("a read: grants and refuses nothing")
	return audit.Rules{
		billingv1.BillingService_GetSeatUsage_FullMethodName:     read,
		billingv1.BillingService_ListUsageReports_FullMethodName: read,
		billingv1.BillingService_GetUsageReport_FullMethodName:   read,
		// The licensed cap is the installation's setting that every seat check obeys, not an
		// object of a workspace's directory: a change to it is a settings change, failing closed
		// by default like a workspace's operator settings.
		billingv1.BillingService_SetSeatCap_FullMethodName: audit.Mutation(audit.Settings),
		// The seat checks answer whether a change fits under the cap: the decision policy's
		// write then follows (policy records its own change, or its refusal, too).
		billingv1.BillingService_CheckSeatCap_FullMethodName:                   audit.Decision(audit.Seats),
		billingv1.BillingService_CheckSeatCapForOperatorBuilder_FullMethodName: audit.Decision(audit.Seats),
		// A usage report writes the number billed: seat pricing, recorded with the seat checks
		// (and failing open with them: a report derives from state already recorded, and its
		// caller asks again).
		billingv1.BillingService_ReportUsage_FullMethodName: audit.Mutation(audit.Seats),

		billingv1.EventService_Watch_FullMethodName: audit.NotAudited("a stream of cap changes already recorded by SetSeatCap (superadmin and service token)"),
	}.With(audit.TrailRules()) // pkg/server registers AuditService beside them
}
