// Package devcert makes self-signed TLS server certificates for localhost: the proxy's on a
// developer's machine (`roleset devcert`, for `make run`, where no openssl may be installed)
// and the test clusters' (pkg/pgtest). Never for production, where certificates come from the
// deployment's secret.
package devcert
