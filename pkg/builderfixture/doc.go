// Package builderfixture is the one typed schema and loader of the operator-builder fixtures
// (the flows, apps, requests and service files under services/policy/internal/builder/testdata,
// whose directory callers pass in; format in its README.md). The builder package's Go runner
// and fuzz seeds read the walk fixtures through it; the policy service's gRPC replay and the
// gateway's REST replay also turn them into service calls (Case), apply the service setup,
// build the requests, turn answers and errors into comparable outcomes and check them, so every
// runner reads the files the same way and reaches its verdict the same way. A fixture with an
// unknown field, trailing data or a name other than its file's fails the load.
package builderfixture
