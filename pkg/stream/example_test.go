package stream_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
)

// policyOpener adapts the generated policy client to stream.Opener: the few lines each
// consumer writes for the service it follows.
func policyOpener(c policyv1.EventServiceClient, kinds ...string) stream.Opener {
	return func(ctx context.Context, afterID int64) (stream.Receiver, error) {
		w, err := c.Watch(ctx, &policyv1.WatchRequest{AfterId: afterID, Kinds: kinds})
		if err != nil {
			return nil, err
		}
		return policyReceiver{w}, nil
	}
}

type policyReceiver struct {
	w policyv1.EventService_WatchClient
}

func (r policyReceiver) Recv() (*commonv1.Event, int64, error) {
	m, err := r.w.Recv()
	if err != nil {
		return nil, 0, err
	}
	return m.GetEvent(), m.GetHeadId(), nil
}

// policyEvents is the server side: policy's EventService handler delegates to ServeWatch,
// with its own rule of who may follow the stream (here: anyone).
type policyEvents struct {
	policyv1.UnimplementedEventServiceServer
	stream *stream.Stream
}

func (h *policyEvents) Watch(req *policyv1.WatchRequest, srv policyv1.EventService_WatchServer) error {
	return stream.ServeWatch(h.stream, req, srv, func(context.Context) error { return nil })
}

// A durable consumer in another service (billing's projection of policy's members): the
// effect and the position commit together, so a crash anywhere neither loses nor repeats an
// event.
func ExampleFollow() {
	var (
		ctx    context.Context             // the process's lifetime
		db     *pgxpool.Pool               // the consumer's own database
		client policyv1.EventServiceClient // dialled to policy
	)
	err := stream.Follow(ctx, stream.FollowOptions{
		Open: policyOpener(client, "member"),
		After: func(ctx context.Context) (int64, error) {
			var id int64
			err := db.QueryRow(ctx, `SELECT last_id FROM consumer WHERE name = 'policy'`).Scan(&id)
			return id, err
		},
		Apply: func(ctx context.Context, e stream.Event) error {
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				// ... apply e to the projection ...
				_, err := tx.Exec(ctx, `UPDATE consumer SET last_id = $1 WHERE name = 'policy'`, e.ID)
				return err
			})
		},
		Resync: func(ctx context.Context) (int64, error) {
			// Rebuild the projection from a snapshot RPC and store its position with it.
			return 0, nil
		},
	})
	log.Print(err)
}
