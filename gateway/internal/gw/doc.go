// Package gw is the REST gateway: it translates HTTP/JSON to gRPC calls on the three services'
// ports, so every REST request goes through the same interceptors (auth, validation, logging,
// tracing) as a gRPC one; it never registers handlers in-process, which would skip them. It also
// serves the merged OpenAPI document and a health page that reports each upstream.
package gw
