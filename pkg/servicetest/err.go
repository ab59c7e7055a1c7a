package servicetest

// Err drops a call's answer and keeps its error, so that a table of calls checked for their
// refusal reads one line a call: func() error { return servicetest.Err(c.Method(ctx, req)) }.
func Err[R any](_ R, err error) error { return err }
