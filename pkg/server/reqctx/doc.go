// Package reqctx carries per-call facts through a request's context: the request id, a
// logger already tagged with it, and log attributes added by inner layers.
//
// It exists as a leaf package because the facts are written by interceptors in pkg/server
// but read by pkg/errs (to put the request id in "internal error" replies and log through
// the tagged logger) and by handlers, and pkg/server imports pkg/errs. The interceptor chain
// also runs outside-in: recovery and logging run before request id and auth, so they cannot
// see values those layers put in a child context. A mutable Call, installed by the outermost
// layer and filled by the inner ones, is how the outer layers learn them.
package reqctx
