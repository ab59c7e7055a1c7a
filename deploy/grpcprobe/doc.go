// Command grpcprobe is the health check baked into every millwright image. The images are
// distroless (no shell, no curl), and Compose cannot run a native gRPC probe the way
// Kubernetes does, so the container's own healthcheck runs this static binary: it asks
// grpc.health.v1 (or, with -http, GETs a URL) and exits 0 only on SERVING (or HTTP 200).
package main
