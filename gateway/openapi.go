// Package gateway holds what the REST gateway serves besides the proxied RPCs: the merged
// OpenAPI document generated from the protos (gateway/openapi, written by `make generate`).
package gateway

import _ "embed"

// OpenAPI is the merged OpenAPI (Swagger 2.0) document of every millwright service.
//
//go:embed openapi/millwright.swagger.json
var OpenAPI []byte
