package reqctx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
)

// MetadataKey is the gRPC metadata key (and HTTP header) that carries the request id, both on
// the incoming request and echoed in the response header.
const MetadataKey = "x-request-id"

// Call holds what inner interceptors learn about a call, for the outer ones to log. It is
// safe for concurrent use: a handler may annotate from its own goroutines.
type Call struct {
	mu        sync.Mutex
	requestID string
	attrs     []slog.Attr
}

type callKey struct{}
type loggerKey struct{}

// Start installs a fresh Call in ctx. The outermost interceptor calls it once per RPC.
func Start(ctx context.Context) (context.Context, *Call) {
	c := &Call{}
	return context.WithValue(ctx, callKey{}, c), c
}

// FromContext returns the Call of this RPC, or nil outside a server call.
func FromContext(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// RequestID returns the id recorded so far ("" before the request id layer ran).
func (c *Call) RequestID() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requestID
}

// Attrs returns a copy of the attributes annotated so far.
func (c *Call) Attrs() []slog.Attr {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]slog.Attr(nil), c.attrs...)
}

// WithRequestID records id as this call's request id. Outside a server call (a client,
// a background loop) it starts a Call so that RequestID still works.
func WithRequestID(ctx context.Context, id string) context.Context {
	c := FromContext(ctx)
	if c == nil {
		ctx, c = Start(ctx)
	}
	c.mu.Lock()
	c.requestID = id
	c.mu.Unlock()
	return ctx
}

// RequestID returns the request id of ctx, or "".
func RequestID(ctx context.Context) string { return FromContext(ctx).RequestID() }

// Annotate adds attributes to the call's final log line (the logging interceptor prints
// them). Auth uses it for the identity; handlers may add their own. No-op outside a call.
func Annotate(ctx context.Context, attrs ...slog.Attr) {
	c := FromContext(ctx)
	if c == nil {
		return
	}
	c.mu.Lock()
	c.attrs = append(c.attrs, attrs...)
	c.mu.Unlock()
}

// NewID returns a random 128-bit request id in hex.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// ValidID reports whether an id supplied by a caller is safe to adopt: short and made of
// characters that cannot forge log fields. Anything else is replaced by a fresh id.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '-', r == '_', r == '.', r == ':':
		default:
			return false
		}
	}
	return true
}

// WithLogger stores a logger (usually tagged with the request id) in ctx.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the logger stored in ctx, or slog.Default() so callers never check nil.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}
