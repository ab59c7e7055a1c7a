package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
)

// RetryPolicy bounds the retries of transient failures.
type RetryPolicy struct {
	// MaxAttempts is the number of calls, the first included. Default 5; 1 disables retries.
	MaxAttempts int
	// MinBackoff is the delay before the first retry, doubled after each one up to
	// MaxBackoff; each delay is jittered to [d/2, d). Defaults 100 ms and 2 s.
	MinBackoff, MaxBackoff time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = 100 * time.Millisecond
	}
	if p.MaxBackoff < p.MinBackoff {
		p.MaxBackoff = max(2*time.Second, p.MinBackoff)
	}
	return p
}

// delay returns the jittered delay before retry number n (0 for the first retry).
func (p RetryPolicy) delay(n int) time.Duration {
	d := p.MaxBackoff
	if n < 30 { // beyond that the shift overflows; MaxBackoff is reached long before
		d = min(p.MaxBackoff, p.MinBackoff<<n)
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Reason returns the millwright ErrorInfo reason of an error returned by the client (a
// refusal's why: NO_ROLE, NO_VIEWER, BUILDER_RIGHTS_OFF, ...), or ERROR_REASON_UNSPECIFIED
// when it carries none (transport failures, local errors).
func Reason(err error) commonv1.ErrorReason {
	r, _ := errs.Reason(err)
	return r
}

// Retryable reports whether err is a transient failure the client retries: Unavailable (the
// server is unreachable, restarting or overloaded before handling), ResourceExhausted (its
// database is busy: "retry later"), or Aborted with reason CONFLICT_RETRY (a serialization
// conflict). Everything else, the security refusals first of all (PermissionDenied,
// InvalidArgument, FailedPrecondition, Unauthenticated), is an answer and is returned as is.
// The retried RPCs are safe to repeat: resolving a connection again returns a valid login.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	case codes.Aborted:
		return Reason(err) == commonv1.ErrorReason_ERROR_REASON_CONFLICT_RETRY
	default:
		return false
	}
}

// call runs fn until it succeeds, fails with a non-retryable error, runs out of attempts or
// ctx ends. Errors keep the gRPC status (status.Code, Reason work on them); when ctx ended,
// errors.Is(err, ctx.Err()) holds too.
func call[T any](ctx context.Context, p RetryPolicy, op string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	for attempt := 1; ; attempt++ {
		v, err := fn(ctx)
		if err == nil {
			return v, nil
		}
		if cerr := ctxErr(ctx, err); cerr != nil {
			return zero, fmt.Errorf("client: %s: %w (attempt %d: %w)", op, cerr, attempt, err)
		}
		if !Retryable(err) {
			return zero, fmt.Errorf("client: %s: %w", op, err)
		}
		if attempt >= p.MaxAttempts {
			return zero, fmt.Errorf("client: %s: giving up after %d attempts: %w", op, attempt, err)
		}
		t := time.NewTimer(p.delay(attempt - 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, fmt.Errorf("client: %s: %w (attempt %d: %w)", op, ctx.Err(), attempt, err)
		case <-t.C:
		}
	}
}

// ctxErr returns ctx's error if the call ended because ctx did. grpc's own deadline timer (or
// a server honouring the rounded grpc-timeout) can report DeadlineExceeded a moment before
// ctx itself expires; such an answer is the caller's deadline too, so wait out that moment.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if dl, ok := ctx.Deadline(); ok && status.Code(err) == codes.DeadlineExceeded {
		if left := time.Until(dl); left < 100*time.Millisecond {
			t := time.NewTimer(left)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return context.DeadlineExceeded
			}
		}
	}
	return nil
}
