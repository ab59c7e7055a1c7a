package servicetest

import (
	"context"
	"time"

	"google.golang.org/grpc"
)

// WatchAnswer opens a Watch stream as token (through open, bounded to 5 s) and returns what its
// first message says: the refusal, or nil for the first heartbeat. Every service's Watch is
// checked this way in the token tables.
func WatchAnswer[M any](token string, open func(context.Context) (grpc.ServerStreamingClient[M], error)) error {
	ctx, cancel := context.WithTimeout(Bearer(token), 5*time.Second)
	defer cancel()
	s, err := open(ctx)
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}
