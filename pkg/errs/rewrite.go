package errs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/pkg/server/reqctx"
)

// ErrPoolExhausted marks a failure to get a database connection within a server-side acquire
// timeout. pgxpool reports that as a bare context.DeadlineExceeded, indistinguishable from the
// caller's own deadline, so store code that bounds Acquire with its own timeout wraps it:
//
//	acq, cancel := context.WithTimeout(ctx, time.Second)
//	defer cancel()
//	conn, err := pool.Acquire(acq)
//	if err != nil && ctx.Err() == nil {
//		return fmt.Errorf("%w: %w", errs.ErrPoolExhausted, err)
//	}
var ErrPoolExhausted = errors.New("database connection pool exhausted")

// RewriteError turns any handler error into a gRPC status error. Statuses pass as they are;
// context and pgx errors get the code a client can act on (retry, back off, give up);
// anything else becomes Internal "internal error" with the request id, and the real error
// goes to the log only. Messages never contain SQL or values from the database: PgError's
// Detail (which quotes row values) and InternalQuery are never read.
func RewriteError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) {
		return err
	}
	log := reqctx.Logger(ctx)

	// Server errors first: when pgx cancels a query for a cancelled context, the server's
	// 57014 is the more precise answer than the context error it may also wrap.
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "40001" || pg.Code == "40P01": // serialization_failure, deadlock_detected
			return New(codes.Aborted, commonv1.ErrorReason_ERROR_REASON_CONFLICT_RETRY,
				"concurrent update conflict; retry the call", nil)
		case pg.Code == "57014": // query_canceled (client cancel or statement_timeout)
			return status.Error(codes.Canceled, "query canceled")
		case pg.Code == "23505": // unique_violation; the constraint name stays in the log
			log.InfoContext(ctx, "unique violation", "sqlstate", pg.Code, "constraint", pg.ConstraintName)
			return New(codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS, "already exists", nil)
		case pg.Code == "53300": // too_many_connections
			log.WarnContext(ctx, "database refused connection", "sqlstate", pg.Code)
			return status.Error(codes.ResourceExhausted, "database busy; retry later")
		case len(pg.Code) == 5 && pg.Code[:2] == "08", // connection_exception class
			pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03": // shutdowns, cannot_connect_now
			log.WarnContext(ctx, "database unavailable", "sqlstate", pg.Code, "error", pg.Message)
			return unavailable("database")
		}
		return internal(ctx, err, "sqlstate", pg.Code)
	}

	switch {
	case errors.Is(err, ErrPoolExhausted), errors.Is(err, puddle.ErrNotAvailable):
		log.WarnContext(ctx, "database pool exhausted", "error", err.Error())
		return status.Error(codes.ResourceExhausted, "database busy; retry later")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case isConnectionError(err):
		log.WarnContext(ctx, "database unavailable", "error", err.Error())
		return unavailable("database")
	}
	// An unclassified error while the caller is gone is almost always caused by its going
	// (a read interrupted mid-way): answer with the caller's own reason, not a false alarm.
	if cerr := ctx.Err(); cerr != nil {
		return status.FromContextError(cerr).Err()
	}
	return internal(ctx, err)
}

// Unavailable is the answer when a dependency (the database, an upstream service) could not
// answer: codes.Unavailable with reason UNAVAILABLE, which clients retry with backoff. It says
// the question was not decided, never "no".
func Unavailable(dependency, msg string) error {
	return New(codes.Unavailable, commonv1.ErrorReason_ERROR_REASON_UNAVAILABLE, msg, map[string]string{"dependency": dependency})
}

func unavailable(dependency string) error { return Unavailable(dependency, dependency+" unavailable") }

func isConnectionError(err error) bool {
	var connect *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connect) ||
		errors.As(err, &netErr) ||
		errors.Is(err, puddle.ErrClosedPool) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) ||
		pgconn.SafeToRetry(err) // pgx: failed before anything reached the server
}

func internal(ctx context.Context, err error, attrs ...any) error {
	id := reqctx.RequestID(ctx)
	args := append([]any{slog.String("error", err.Error())}, attrs...)
	reqctx.Logger(ctx).ErrorContext(ctx, "internal error", args...)
	msg := "internal error"
	if id != "" {
		msg += " (request id " + id + ")"
	}
	return status.Error(codes.Internal, msg)
}
