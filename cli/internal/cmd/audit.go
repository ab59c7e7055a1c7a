package cmd

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/millwright/millwright/cli/internal/output"
	auditv1 "github.com/millwright/millwright/pkg/gen/millwright/audit/v1"
)

// eventColumns are the audit event fields a person scans for; --json has them all.
var eventColumns = []string{"seq", "time", "class", "outcome", "code", "rule", "pointer", "actor_kind", "actor", "workspace", "object"}

func (a *app) auditCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "audit",
		Short:   "A service's audit trail (AuditService; superadmin token): list, tail, verify, hash",
		GroupID: "follow",
	}
	serviceArg := func(cmd *cobra.Command) *cobra.Command {
		cmd.Args = cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs)
		cmd.ValidArgs = services
		return cmd
	}
	listCmd := listCommand(a, "audit event, oldest first (--workspace filters; a context's default does not)", "",
		auditv1.NewAuditServiceClient, auditv1.AuditServiceClient.ListAuditEvents, true, eventColumns...)

	var after int64
	var limit int
	tail := serviceArg(&cobra.Command{
		Use:         "tail policy|roleset|billing",
		Short:       "WatchAuditEvents: follow new events until Ctrl-C (--after 0: every retained one first)",
		Annotations: map[string]string{streaming: "yes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, err := a.conn(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			s, err := auditv1.NewAuditServiceClient(conn).WatchAuditEvents(cmd.Context(), &auditv1.WatchAuditEventsRequest{AfterSeq: after})
			if err != nil {
				return err
			}
			for n := 0; limit == 0 || n < limit; n++ {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return ended(cmd.Context(), err)
				}
				if err := output.Page(a.out, m.GetEvent().ProtoReflect().Descriptor(), []*auditv1.AuditEvent{m.GetEvent()}, n == 0, eventColumns...); err != nil {
					return err
				}
			}
			return nil
		},
	})
	tail.Flags().Int64Var(&after, "after", -1, "start after this seq (0: every retained event; negative: only new ones)")
	tail.Flags().IntVar(&limit, "limit", 0, "stop after this many events (0: follow until Ctrl-C)")

	verify := serviceArg(&cobra.Command{
		Use:   "verify policy|roleset|billing",
		Short: "VerifyAuditChain: exit 1 and name the first broken event if the chain does not verify",
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *auditv1.VerifyAuditChainResponse
			if err := call(a, cmd, args[0], auditv1.NewAuditServiceClient, func(c auditv1.AuditServiceClient) (*auditv1.VerifyAuditChainResponse, error) {
				var err error
				resp, err = c.VerifyAuditChain(cmd.Context(), &auditv1.VerifyAuditChainRequest{})
				return resp, err
			}); err != nil {
				return err
			}
			if !resp.GetOk() {
				return refused{fmt.Sprintf("the %s audit chain is broken at seq %d", args[0], resp.GetFirstBadSeq())}
			}
			return nil
		},
	})
	hash := serviceArg(&cobra.Command{
		Use:   "hash policy|roleset|billing < VALUE",
		Short: "HashAuditValue: the keyed hash under which the trail records a secret read from standard input",
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := io.ReadAll(io.LimitReader(a.Stdin, 8192))
			if err != nil {
				return err
			}
			value := strings.TrimRight(string(b), "\r\n")
			if value == "" {
				return errors.New("no value on standard input (a secret is never taken as an argument)")
			}
			return call(a, cmd, args[0], auditv1.NewAuditServiceClient, func(c auditv1.AuditServiceClient) (*auditv1.HashAuditValueResponse, error) {
				return c.HashAuditValue(cmd.Context(), &auditv1.HashAuditValueRequest{Value: value})
			})
		},
	})
	c.AddCommand(listCmd, tail, verify, hash)
	return c
}

// when parses an RFC 3339 time, or a duration meaning that long ago; nil for "".
func when(flag, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return timestamppb.New(time.Now().Add(-d)), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, fmt.Errorf("%s %q: an RFC 3339 time or a duration (1h)", flag, v)
	}
	return timestamppb.New(t), nil
}
