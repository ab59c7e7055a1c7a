// Package errs builds the gRPC errors every millwright service returns: a standard status
// code plus one or more google.rpc.ErrorInfo details (domain "millwright", reason from
// commonv1.ErrorReason), and turns everything else (pgx errors, context errors, bugs) into a
// status through RewriteError, so a client never sees Unknown, a raw SQL error or SQL text.
//
// ErrorInfo.Reason is the full enum value name, e.g. "ERROR_REASON_NO_VIEWER", not the name
// with the prefix stripped: it is then exactly what commonv1.ErrorReason_value parses and what
// the proto documents, so clients in any language map it back to the enum without a rule of
// their own.
package errs
