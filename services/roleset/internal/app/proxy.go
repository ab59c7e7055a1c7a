package app

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/millwright/millwright/pkg/audit"
	"github.com/millwright/millwright/pkg/defaults"
	"github.com/millwright/millwright/pkg/failpoint"
	"github.com/millwright/millwright/services/roleset/internal/engine"
	"github.com/millwright/millwright/services/roleset/internal/pgproxy"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/ticket"
)

// proxyAuth answers the proxy's lookups from tickets. Before the client has proved the secret
// it only reads the ticket's verifier (one indexed read: a caller who saw a ticket id in a log
// makes roleset do nothing more); once proved, the dial takes the decision again
// (engine.TicketUpstream), so a ticket whose run ended or whose decision changed logs no one
// in, whatever replica minted it.
type proxyAuth struct{ eng *engine.Engine }

// refusedTicket is what a client that proved the secret of a ticket no longer good gets: the
// same 28P01 as any refused ticket.
func refusedTicket(user string) error {
	return &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "` + user + `"`}
}

func (a proxyAuth) Verifier(ctx context.Context, user, database string) (string, pgproxy.Target, bool, error) {
	id, err := ticket.ParseID(user)
	if err != nil {
		return "", pgproxy.Target{}, false, nil
	}
	tk, err := a.eng.Ticket(ctx, id)
	if errors.Is(err, engine.ErrTicketRefused) {
		return "", pgproxy.Target{}, false, nil
	}
	if err != nil {
		return "", pgproxy.Target{}, false, err
	}
	var clusterID string // set by the dial, read by Terminate (which only follows a dial)
	return tk.Verifier, pgproxy.Target{
		Dial: func(ctx context.Context, params map[string]string) (*pgproxy.Backend, error) {
			up, err := a.eng.TicketUpstream(ctx, id)
			if errors.Is(err, engine.ErrTicketRefused) {
				return nil, refusedTicket(user)
			}
			if err != nil {
				return nil, err
			}
			if database != up.Conn.Database {
				return nil, refusedTicket(user) // a ticket is good for its data table's database only
			}
			c := up.Conn
			u := url.URL{Scheme: "postgres", User: url.UserPassword(c.User, c.Password),
				Host: net.JoinHostPort(c.Host, strconv.Itoa(c.Port)), Path: "/" + c.Database}
			cfg, err := pgconn.ParseConfig(u.String())
			if err != nil {
				return nil, err
			}
			clusterID = up.ClusterID
			return pgproxy.DialConfig(cfg)(ctx, params)
		},
		Terminate: func(ctx context.Context, pid uint32) error {
			return a.eng.TerminateBackend(ctx, clusterID, pid)
		},
		Bind: pgproxy.Binding{TicketID: tk.ID, Workspace: tk.Workspace, JobID: tk.JobID, DataTable: tk.Datatable, Login: tk.Login},
	}, true, nil
}

// cancelKeys keeps the proxy's cancel keys in roleset's database, so a cancel request reaching
// any replica finds its session's upstream.
type cancelKeys struct{ st *store.Store }

func secretBytes(s uint32) []byte { return binary.BigEndian.AppendUint32(nil, s) }

func (k cancelKeys) Put(ctx context.Context, key pgproxy.CancelKey, t pgproxy.CancelTarget) error {
	host, port, err := net.SplitHostPort(t.Address)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	return k.st.PutCancelKey(ctx, store.CancelKey{ProxyPID: key.PID, ProxySecret: secretBytes(key.Secret),
		UpstreamHost: host, UpstreamPort: p, UpstreamPID: t.PID, UpstreamSecret: t.Secret})
}

func (k cancelKeys) Get(ctx context.Context, key pgproxy.CancelKey) (pgproxy.CancelTarget, bool, error) {
	c, err := k.st.GetCancelKey(ctx, key.PID, secretBytes(key.Secret))
	if errors.Is(err, store.ErrNotFound) {
		return pgproxy.CancelTarget{}, false, nil
	}
	if err != nil {
		return pgproxy.CancelTarget{}, false, err
	}
	return pgproxy.CancelTarget{Network: "tcp", Address: net.JoinHostPort(c.UpstreamHost, strconv.Itoa(c.UpstreamPort)),
		PID: c.UpstreamPID, Secret: c.UpstreamSecret}, true, nil
}

func (k cancelKeys) Delete(ctx context.Context, key pgproxy.CancelKey) error {
	return k.st.DeleteCancelKey(ctx, key.PID, secretBytes(key.Secret))
}

// NewProxy builds the proxy of this roleset over eng and st; its sessions are recorded in rec
// (nil: not recorded).
func NewProxy(eng *engine.Engine, st *store.Store, tlsCfg *tls.Config, logger *slog.Logger, rec *audit.Recorder) *pgproxy.Server {
	cfg := pgproxy.Config{Authorizer: proxyAuth{eng}, CancelKeys: cancelKeys{st}, TLS: tlsCfg, Logger: logger}
	if rec != nil {
		cfg.OnSession = sessionAudit(rec, logger)
	}
	return pgproxy.New(cfg)
}

// ProxySessionRPC is the RPC name of the proxy's session events in the audit trail.
const ProxySessionRPC = "proxy/session"

// endWhy says in the trail why a session ended; a session closed by CloseSessions was
// revoked by Rejudge (the only caller).
var endWhy = map[string]string{
	pgproxy.EndClient:   "client closed",
	pgproxy.EndUpstream: "the database closed the session",
	pgproxy.EndClosed:   "revoked: re-judged, its run ended, its ticket expired or its decision no longer holds",
	pgproxy.EndShutdown: "the proxy shut down",
}

// sessionAudit records each proxied session in the audit trail (class proxy, docs/roleset.md
// "Audit trail"): its start, granted or refused with the SQLSTATE the client got as the rule,
// and its end with why. The ticket's id and login name the session; its secret is never seen
// here. The class fails open by default: an event that cannot be written is logged and the
// session goes on; configured to fail closed, a start that cannot be recorded is refused.
func sessionAudit(rec *audit.Recorder, logger *slog.Logger) func(pgproxy.SessionEvent) error {
	return func(s pgproxy.SessionEvent) error {
		e := audit.Event{RPC: ProxySessionRPC, Class: audit.Proxy, Outcome: audit.Granted, ActorKind: "job",
			Actor: s.Bind.JobID, Workspace: s.Bind.Workspace, Details: map[string]string{"session": "start", "database": s.Database}}
		e.Object = "ticket=" + s.Bind.TicketID
		if s.Bind.TicketID == "" {
			// Refused before any ticket was found: nothing of the client's (a user name, a
			// database) is recorded, so that every such refusal is the same decision, counted
			// in the repeat window instead of written each time: anyone who reaches the port
			// may try, and must not be able to make roleset write per try (docs/audit.md, as
			// for calls refused by authentication). A wrong secret for a real ticket is bound
			// to it and recorded with it. millwright_roleset_proxy_refusals_total counts them.
			e.ActorKind, e.Object, e.Details = "anonymous", "ticket=unknown", map[string]string{"session": "start"}
		}
		if s.Bind.Login != "" {
			e.Object += " login=" + s.Bind.Login
			e.Details["data_table"] = s.Bind.Workspace + "/" + s.Bind.DataTable
		}
		switch {
		case s.End:
			e.Details["session"], e.Details["why"] = "end", endWhy[s.Why]
			if s.Why == pgproxy.EndClosed {
				e.Outcome, e.Rule = audit.Refused, "revoked"
			}
		case s.Code != "":
			e.Outcome, e.Rule, e.Code = refusalOutcome(s.Code), s.Code, s.Code
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := rec.Record(ctx, e)
		if err == nil {
			return nil
		}
		if granting := !s.End && s.Code == ""; granting && rec.FailsClosed(audit.Proxy) {
			return err
		}
		logger.Error("audit: proxy session event not recorded; the session goes on (class proxy fails open)",
			"object", e.Object, "session", e.Details["session"], "outcome", e.Outcome, "rule", e.Rule, "err", err)
		return nil
	}
}

// refusalOutcome is the outcome of a start refused with SQLSTATE code: a refusal when the
// client was not let in (28: authorization, 53: too many), a failure when the proxy could
// not decide or connect (57P03, 08006, an upstream's own error).
func refusalOutcome(code string) string {
	if strings.HasPrefix(code, "28") || strings.HasPrefix(code, "53") {
		return audit.Refused
	}
	return audit.Failed
}

// Rejudge ends the proxied sessions whose decision no longer holds, each time the engine drops
// cached decisions (an event of policy's or roleset's stream: a run ended, a token was revoked,
// a member's groups or a role or a data table's permissions changed). The decision of each live
// ticket of the workspaces concerned (of every workspace for a role, data table or cluster
// change) is taken again; a refused one is revoked and its sessions closed, upstream backend
// included. Changes that arrive during a pass are coalesced into the next one, so the work is
// one pass at a time over the sessions concerned, however many events come. A lookup that
// fails for another reason (policy unreachable) leaves the session, and is retried at the next
// change.
//
// Every `every` (default 30 s) a pass covers every session even without a change: a ticket
// that reached its lifetime (--ticket-lifetime) while its run goes on ends its sessions too.
func Rejudge(ctx context.Context, eng *engine.Engine, px *pgproxy.Server, logger *slog.Logger, counts *RejudgeCounts, every time.Duration) error {
	tick := time.NewTicker(defaults.Positive(every, 30*time.Second))
	defer tick.Stop()
	for {
		var expiry bool
		select {
		case <-ctx.Done():
			return nil
		case <-eng.Changed():
		case <-tick.C:
			expiry = true
		}
		all, workspaces := eng.TakeChanged()
		all = all || expiry
		seen := map[string]bool{}
		for _, b := range px.Bindings() {
			if all || workspaces[b.Workspace] {
				seen[b.TicketID] = true
			}
		}
		refused := map[string]bool{}
		for id := range seen {
			_, err := eng.TicketUpstream(ctx, id)
			switch {
			case errors.Is(err, engine.ErrTicketRefused):
				refused[id] = true
			case err != nil && ctx.Err() == nil:
				counts.Failed.Add(1)
				logger.Warn("re-judging a proxied session", "ticket", id, "error", err)
			}
		}
		if len(refused) == 0 {
			continue
		}
		failpoint.Hit("roleset/rejudge/before-close")
		// One call for all of them: CloseSessions ends their backends in parallel.
		n := px.CloseSessions(func(b pgproxy.Binding) bool { return refused[b.TicketID] })
		counts.Ended.Add(int64(n))
		logger.Info("proxied sessions ended: their decision no longer holds", "tickets", len(refused), "sessions", n)
	}
}

// RejudgeCounts are Rejudge's running totals (metrics): sessions it ended, and decisions it
// could not take again (left running until the next change).
type RejudgeCounts struct{ Ended, Failed atomic.Int64 }

// proxyCollectors are the proxy's metrics (docs/operations.md, "The PostgreSQL proxy").
func proxyCollectors(px *pgproxy.Server, rj *RejudgeCounts) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "millwright_roleset_proxy_connections",
			Help: "Client connections the proxy holds: sessions and start-ups in progress."},
			func() float64 { return float64(px.Stats().Connections) }),
		refusalCollector{px},
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_roleset_proxy_sessions_ended_total",
			Help: "Proxied sessions ended because their decision no longer held (run ended, role, permissions, groups)."},
			func() float64 { return float64(rj.Ended.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "millwright_roleset_proxy_rejudge_failures_total",
			Help: "Decisions of live proxied sessions that could not be taken again (policy or the database unreachable)."},
			func() float64 { return float64(rj.Failed.Load()) }),
	}
}

var refusalDesc = prometheus.NewDesc("millwright_roleset_proxy_refusals_total",
	"Proxy start-ups refused, by the SQLSTATE sent to the client (28P01 ticket refused, 53300 full, 08P01 malformed, 08006 upstream unreachable, 57P03 lookup failed).",
	[]string{"sqlstate"}, nil)

// refusalCollector reads the refusals by SQLSTATE from the proxy at each scrape.
type refusalCollector struct{ px *pgproxy.Server }

func (refusalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- refusalDesc }

func (c refusalCollector) Collect(ch chan<- prometheus.Metric) {
	for code, n := range c.px.Stats().Refusals {
		ch <- prometheus.MustNewConstMetric(refusalDesc, prometheus.CounterValue, float64(n), code)
	}
}
