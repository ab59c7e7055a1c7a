package gw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/millwright/millwright/pkg/errs"
)

// Server returns the HTTP server for handler h under lim: the header, idle and header-size
// bounds are the server's own; the body and write bounds are per request (bound), because the
// server's ReadTimeout and WriteTimeout are per connection-request and would also cut a
// server-streaming answer (Watch) that legitimately lasts.
func Server(addr string, h http.Handler, lim Limits) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           bound(lim, h),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		IdleTimeout:       lim.IdleTimeout,
	}
}

// bound applies the per-request limits:
//   - a Content-Length over MaxBodyBytes is answered 413 at once, before any of the body is
//     read; a body without a length (chunked) is cut at MaxBodyBytes and answered 413;
//   - the body must be read in full within BodyReadTimeout (a read deadline on the
//     connection), else 408; the deadline is lifted once the body is at its end, so the
//     connection's later reads (the next request, or the close detection of a stream) are
//     the server's own business again;
//   - every write of the answer must complete within WriteTimeout.
//
// A request without a body (GET, Watch) gets no read deadline at all: net/http is already
// reading its connection in the background to notice a client that goes away, and a
// deadline there would cancel a long stream.
func bound(lim Limits, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w = &deadlineWriter{ResponseWriter: w, rc: rc, timeout: lim.WriteTimeout}
		if r.ContentLength > int64(lim.MaxBodyBytes) {
			// Not a byte of the body is read: the server closes the connection after the
			// answer instead of draining what the client still sends.
			w.Header().Set("Connection", "close")
			writeRefusal(w, http.StatusRequestEntityTooLarge, tooLarge(lim.MaxBodyBytes))
			return
		}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			_ = rc.SetReadDeadline(time.Now().Add(lim.BodyReadTimeout))
			b := &boundedBody{src: http.MaxBytesReader(w, r.Body, int64(lim.MaxBodyBytes)), rc: rc, lim: lim}
			r.Body = b
			r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, b))
		}
		next.ServeHTTP(w, r)
	})
}

type bodyKey struct{}

// Why a body could not be read, for bodyRefusal.
const (
	bodyOK int32 = iota
	bodyTooLarge
	bodyTooSlow
)

// boundedBody is a request body that remembers why it failed, so that the error grpc-gateway
// reports for it (a decode error, which it would answer 400) is answered 413 or 408.
type boundedBody struct {
	src     io.ReadCloser
	rc      *http.ResponseController
	lim     Limits
	failure atomic.Int32
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.src.Read(p)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.As(err, &tooBig):
		b.failure.CompareAndSwap(bodyOK, bodyTooLarge)
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.failure.CompareAndSwap(bodyOK, bodyTooSlow)
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.src.Close() }

// bodyRefusal returns the answer for a request whose body failed under the limits, if it did.
func bodyRefusal(r *http.Request) (int, error, bool) {
	b, ok := r.Context().Value(bodyKey{}).(*boundedBody)
	if !ok {
		return 0, nil, false
	}
	switch b.failure.Load() {
	case bodyTooLarge:
		return http.StatusRequestEntityTooLarge, tooLarge(b.lim.MaxBodyBytes), true
	case bodyTooSlow:
		return http.StatusRequestTimeout, errs.InvalidField("body", "read_timeout",
			fmt.Sprintf("the request body did not arrive within %s (--body-read-timeout)", b.lim.BodyReadTimeout)), true
	}
	return 0, nil, false
}

func tooLarge(limit int) error {
	return errs.InvalidField("body", "max_bytes",
		"the request body is over "+strconv.Itoa(limit)+" bytes (--max-body-bytes)")
}

// writeRefusal answers err's google.rpc.Status as JSON, the body every other gateway error
// has, with the HTTP code given.
func writeRefusal(w http.ResponseWriter, code int, err error) {
	body, merr := protojson.MarshalOptions{UseProtoNames: true}.Marshal(status.Convert(err).Proto())
	if merr != nil {
		http.Error(w, http.StatusText(code), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// deadlineWriter gives every write of the answer WriteTimeout to complete. The deadline is set
// before each write (not once per answer), so a stream that keeps sending is not cut, and a
// client that stops reading is.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) extend() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

func (d *deadlineWriter) WriteHeader(code int) { d.extend(); d.ResponseWriter.WriteHeader(code) }

func (d *deadlineWriter) Write(p []byte) (int, error) { d.extend(); return d.ResponseWriter.Write(p) }

// Flush keeps server-streaming answers streaming through the wrapper.
func (d *deadlineWriter) Flush() {
	d.extend()
	_ = d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
