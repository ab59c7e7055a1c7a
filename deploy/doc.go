// Package deploy holds millwright's container, Compose and Kubernetes manifests and the test
// that keeps them honest: it renders every kustomize overlay and the Compose file, checks the
// operational rules (replicas, probes, limits, secrets only by reference, a migration Job per
// service) and runs each binary's -h so that a flag or environment variable the manifests set
// but the binary no longer has fails here, not in a rollout.
package deploy
