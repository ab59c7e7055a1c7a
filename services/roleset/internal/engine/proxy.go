package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/millwright/millwright/pkg/failpoint"
	"github.com/millwright/millwright/services/roleset/internal/datatableref"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/ticket"
)

// ProxyConfig is where clients reach this instance's PostgreSQL proxy (docs/design.md,
// "Run-scoped database credentials").
type ProxyConfig struct {
	// Host and Port are what ResolveConnection answers in proxy mode; Host "" means no proxy.
	Host string
	Port int
	// TicketLifetime bounds a ticket's life even while its run goes on (default 24 h).
	TicketLifetime time.Duration
}

func ticketAAD(id string) string { return "ticket:" + id }

// issueTicket turns a decision's direct credentials c into a ticket for the proxy: stored with
// the run's job token encrypted (so any replica can take the decision again) and answered in
// place of c. The real password stays here.
func (e *Engine) issueTicket(ctx context.Context, token string, ref datatableref.Ref, d *Decision, c Connection) (Connection, error) {
	p := e.cfg.Proxy
	if p.Host == "" {
		return Connection{}, &Error{Code: CodeProxyOff, Field: d.dt.Name,
			Msg: fmt.Sprintf("data table %q hands out proxy tickets, but this roleset runs no proxy", d.dt.Name)}
	}
	life := p.TicketLifetime
	if life <= 0 {
		life = 24 * time.Hour
	}
	ids := make([]int64, len(d.members))
	for i, m := range d.members {
		ids[i] = m.ID
	}
	tk, secretText, err := ticket.Mint(time.Now(), life, ticket.Binding{Workspace: d.dt.Workspace, JobID: d.run.JobID,
		Datatable: d.dt.Name, Login: d.Login, RoleIDs: ids})
	if err != nil {
		return Connection{}, err
	}
	tk.Reference = ref.String()
	if tk.TokenEnc, err = e.cfg.Keys.Encrypt(token, ticketAAD(tk.ID)); err != nil {
		return Connection{}, err
	}
	failpoint.Hit("roleset/ticket/before-insert")
	if _, err := e.store.CreateTicket(ctx, tk); err != nil {
		return Connection{}, err
	}
	failpoint.Hit("roleset/ticket/inserted") // stored, the caller never told
	c.Host, c.Port, c.User, c.Password, c.Proxy = p.Host, p.Port, tk.ID, secretText, true
	return c, nil
}

// ErrTicketRefused is a ticket the proxy must refuse: unknown, revoked, expired, or one whose
// decision no longer holds (it is then revoked). Which it was is not said to the client.
var ErrTicketRefused = errors.New("ticket refused")

// Upstream is where a ticket's session goes: the direct credentials of its decision, taken
// again now, and the cluster they are on.
type Upstream struct {
	Ticket    ticket.Ticket
	Conn      Connection
	ClusterID string
}

// Ticket returns a usable ticket (its verifier and binding), ErrTicketRefused if there is none:
// what the proxy may know before the client has proved the secret.
func (e *Engine) Ticket(ctx context.Context, id string) (ticket.Ticket, error) {
	tk, err := e.store.TicketForProxy(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return tk, ErrTicketRefused
	}
	return tk, err
}

// TicketUpstream takes a ticket's decision again, as the proxy needs when a session starts and
// after any event that may have changed it: the run must still be live and the decision the
// same login (so the same roles). A ticket whose decision changed is revoked. Errors other than
// ErrTicketRefused are transient (policy or the database unreachable).
func (e *Engine) TicketUpstream(ctx context.Context, id string) (Upstream, error) {
	tk, err := e.Ticket(ctx, id)
	if err != nil {
		return Upstream{}, err
	}
	token, err := e.cfg.Keys.Decrypt(tk.TokenEnc, ticketAAD(tk.ID))
	if err != nil {
		return Upstream{}, fmt.Errorf("ticket %s: %w", tk.ID, err)
	}
	ref, err := datatableref.Parse(tk.Reference)
	if err != nil {
		return Upstream{}, fmt.Errorf("ticket %s: reference: %w", tk.ID, err)
	}
	c, err := e.resolve(ctx, token, ref, false)
	var refusal *Error
	if errors.As(err, &refusal) {
		e.revokeTicket(ctx, tk, refusal.Msg)
		return Upstream{}, ErrTicketRefused
	}
	if err != nil {
		return Upstream{}, err
	}
	if c.User != tk.Login {
		e.revokeTicket(ctx, tk, "the decision now names login "+strconv.Quote(c.User))
		return Upstream{}, ErrTicketRefused
	}
	return Upstream{Ticket: tk, Conn: c, ClusterID: c.clusterID}, nil
}

func (e *Engine) revokeTicket(ctx context.Context, tk ticket.Ticket, why string) {
	failpoint.Hit("roleset/ticket/before-revoke")
	if _, err := e.store.RevokeTicket(ctx, tk.ID); err != nil {
		e.cfg.Logger.Warn("revoke ticket", "ticket", tk.ID, "error", err)
		return
	}
	failpoint.Hit("roleset/ticket/revoked") // revoked, its sessions not yet closed
	e.cfg.Logger.Info("ticket revoked: its decision no longer holds", "ticket", tk.ID, "workspace", tk.Workspace,
		"job_id", tk.JobID, "datatable", tk.Datatable, "why", why)
}

// DeleteExpiredTickets removes the tickets that expired before now, in bounded batches until
// none is left (each row is useless once expired: TicketForProxy refuses it), and reports how
// many it removed.
func (e *Engine) DeleteExpiredTickets(ctx context.Context, now time.Time) (int64, error) {
	var total int64
	for {
		n, err := e.store.DeleteExpiredTickets(ctx, now, store.DefaultTicketBatch)
		total += n
		if err != nil || n < store.DefaultTicketBatch {
			return total, err
		}
	}
}

// TerminateBackend ends one backend of a cluster (a proxied session's upstream), so that it is
// gone from pg_stat_activity, not left running until it next reads its closed socket.
func (e *Engine) TerminateBackend(ctx context.Context, clusterID string, pid uint32) error {
	_, t, err := e.targetOf(ctx, clusterID)
	if err != nil {
		return err
	}
	return t.TerminateBackend(ctx, pid)
}
