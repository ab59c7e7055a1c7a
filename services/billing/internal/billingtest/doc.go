// Package billingtest is shared test plumbing for billing's integration tests: a migrated
// billing database per test (pkg/pgtest), and a stand-in for policy's upstream: a real
// pkg/stream over a test database whose member and settings tables emit the same event
// shapes as policy's, served over real gRPC (EventService.Watch and
// WorkspaceService.GetMembershipSnapshot), which a test can stop and restart mid-stream.
package billingtest
