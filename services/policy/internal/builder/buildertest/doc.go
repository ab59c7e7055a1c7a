// Package buildertest generates large, legitimate flow values for the builder benchmarks, so
// the pure walk's benchmark and the service's end-to-end benchmark measure the same shape.
package buildertest
