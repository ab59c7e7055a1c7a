package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/millwright/millwright/cli/internal/output"
	billingv1 "github.com/millwright/millwright/pkg/gen/millwright/billing/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/stream"
)

// watchers open each service's EventService.Watch as a stream.Receiver (the adapter every
// follower of a Watch uses), so one loop prints all three.
var watchers = map[string]func(ctx context.Context, conn grpc.ClientConnInterface, after int64, kinds []string) (stream.Receiver, error){
	policy: func(ctx context.Context, conn grpc.ClientConnInterface, after int64, kinds []string) (stream.Receiver, error) {
		s, err := policyv1.NewEventServiceClient(conn).Watch(ctx, &policyv1.WatchRequest{AfterId: after, Kinds: kinds})
		return stream.Receive(s), err
	},
	roleset: func(ctx context.Context, conn grpc.ClientConnInterface, after int64, kinds []string) (stream.Receiver, error) {
		s, err := rolesetv1.NewEventServiceClient(conn).Watch(ctx, &rolesetv1.WatchRequest{AfterId: after, Kinds: kinds})
		return stream.Receive(s), err
	},
	billing: func(ctx context.Context, conn grpc.ClientConnInterface, after int64, kinds []string) (stream.Receiver, error) {
		s, err := billingv1.NewEventServiceClient(conn).Watch(ctx, &billingv1.WatchRequest{AfterId: after, Kinds: kinds})
		return stream.Receive(s), err
	},
}

var services = []string{policy, roleset, billing}

func (a *app) watchCmd() *cobra.Command {
	var after int64
	var kinds []string
	var limit int
	c := &cobra.Command{
		Use:   "watch policy|roleset|billing",
		Short: "Follow a service's event stream (EventService.Watch), one line per event, until Ctrl-C",
		Long: `Follow a service's invalidation stream: one line per event (id, time, kind, op, workspace, key),
or one JSON object per line with --json. --after 0 starts with every retained event, a
negative value (the default) with only new ones.`,
		GroupID:     "follow",
		Args:        cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs:   services,
		Annotations: map[string]string{streaming: "yes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, err := a.conn(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			r, err := watchers[args[0]](cmd.Context(), conn, after, kinds)
			if err != nil {
				return err
			}
			for n := 0; limit == 0 || n < limit; {
				ev, _, err := r.Recv()
				if err != nil {
					return ended(cmd.Context(), err)
				}
				if ev == nil {
					continue // a heartbeat
				}
				n++
				if a.json {
					err = output.JSONLine(a.Stdout, ev)
				} else {
					_, err = fmt.Fprintf(a.Stdout, "%d %s %s %s %s %s\n", ev.GetId(), output.Time(ev.GetCreatedAt()),
						ev.GetKind(), ev.GetOp(), orDash(ev.GetWorkspace()), orDash(ev.GetKey()))
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.Flags().Int64Var(&after, "after", -1, "start after this event id (0: every retained event; negative: only new ones)")
	c.Flags().StringSliceVar(&kinds, "kind", nil, "only events of this kind (repeatable)")
	c.Flags().IntVar(&limit, "limit", 0, "stop after this many events (0: follow until Ctrl-C)")
	return c
}

// ended is a stream's end: Ctrl-C is a normal way to stop following.
func ended(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return err
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
