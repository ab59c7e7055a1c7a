// Package policyidentity is the roleset service's window on policy: engine.Identity over policy's
// gRPC RunService and WorkspaceService, and the follower of policy's Watch stream that drops
// the engine's caches on member, group, folder, run and token events and says whether the
// stream is live (caches are only trusted while it is).
package policyidentity
