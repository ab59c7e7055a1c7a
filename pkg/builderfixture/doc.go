// Package builderfixture reads the operator-builder fixtures (the flows, apps, requests and
// service files under services/policy/internal/builder/testdata, whose directory callers pass
// in) into transport-independent cases, turns the policy service's gRPC answers and errors into
// comparable outcomes, and checks an outcome against its case, so that the policy service's
// gRPC replay and the gateway's end-to-end REST replay share one reading of the files and reach
// their verdicts the same way; each caller keeps only how it sets up its stack and makes the
// call.
package builderfixture
