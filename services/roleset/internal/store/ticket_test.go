package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/store"
	"github.com/millwright/millwright/services/roleset/internal/ticket"
	"github.com/millwright/millwright/services/roleset/migrations"
)

// newStore is a store on a fresh, fully migrated roleset database.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	return store.New(pgtest.Pool(t, pgtest.NewDatabase(t, "roleset", pgtest.Migrations(migrations.FS))))
}

// createTicket mints and stores a ticket with a one-hour lifetime, returning it and its secret.
func createTicket(t *testing.T, s *store.Store, b ticket.Binding) (ticket.Ticket, string) {
	t.Helper()
	tk, pw, err := ticket.Mint(time.Now(), time.Hour, b)
	require.NoError(t, err)
	tk.Reference, tk.TokenEnc = "datatable://"+b.Datatable+"?as=viewer", []byte("encrypted job token")
	stored, err := s.CreateTicket(context.Background(), tk)
	require.NoError(t, err)
	return stored, pw
}

// expire moves a ticket's times back by an hour and a minute, so it expired a minute ago by
// the database's clock.
func expire(t *testing.T, s *store.Store, id string) {
	t.Helper()
	_, err := s.Pool.Exec(context.Background(), `UPDATE ticket SET created_at = created_at - interval '61 minutes',
		expires_at = expires_at - interval '61 minutes' WHERE id = $1`, id)
	require.NoError(t, err)
}

// usable reports whether the proxy would find the ticket.
func usable(t *testing.T, s *store.Store, id string) bool {
	t.Helper()
	_, err := s.TicketForProxy(context.Background(), id)
	if err != nil {
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	return err == nil
}

func run(ws, job, dt, login string) ticket.Binding {
	return ticket.Binding{Workspace: ws, JobID: job, Datatable: dt, Login: login, RoleIDs: []int64{2, 1}}
}

func TestTicketForProxy(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tk, pw := createTicket(t, s, run("ws", "job-1", "main", "wm_set_a"))

	got, err := s.TicketForProxy(ctx, tk.ID)
	require.NoError(t, err)
	require.Equal(t, tk, got)
	require.Equal(t, ticket.Binding{Workspace: "ws", JobID: "job-1", Datatable: "main", Login: "wm_set_a", RoleIDs: []int64{1, 2}}, got.Binding)
	require.Equal(t, time.Hour, got.ExpiresAt.Sub(got.CreatedAt), "the lifetime is kept, on the database's clock")
	require.True(t, got.Usable(time.Now()))
	keys, err := secret.ParseScramVerifier(got.Verifier)
	require.NoError(t, err)
	require.True(t, keys.Verifies(pw), "the stored verifier is the secret's")
	var stored int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM ticket WHERE strpos(ticket::text, $1) > 0`, pw).Scan(&stored))
	require.Zero(t, stored, "the secret is stored nowhere")

	_, err = s.CreateTicket(ctx, tk)
	require.ErrorIs(t, err, store.ErrAlreadyExists)

	for _, tc := range []struct {
		name   string
		retire func(id string)
	}{
		{"revoked", func(string) {
			ids, err := s.RevokeTicketsOfRun(ctx, "ws", "job-2")
			require.NoError(t, err)
			require.Len(t, ids, 1)
		}},
		{"expired", func(id string) { expire(t, s, id) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other, _ := createTicket(t, s, run("ws", "job-2", "main", "wm_set_a"))
			require.True(t, usable(t, s, other.ID))
			tc.retire(other.ID)
			require.False(t, usable(t, s, other.ID))
		})
	}
	require.False(t, usable(t, s, "t_aaaaaaaaaaaaaaaaaaaaaaaaaa"), "unknown")
	require.True(t, usable(t, s, tk.ID), "the first ticket is untouched")
}

// tenantTickets are tickets that differ from the first in one part of their binding each.
type tenantTickets struct {
	run         ticket.Ticket // ws1, job-1, data table main, login wm_set_a
	runOther    ticket.Ticket // the same run, data table other
	otherRun    ticket.Ticket // ws1, job-2, data table main, login wm_set_b
	otherTenant ticket.Ticket // ws2, job-1, data table main, login wm_set_a
}

func createTenantTickets(t *testing.T, s *store.Store) (tt tenantTickets) {
	t.Helper()
	tt.run, _ = createTicket(t, s, run("ws1", "job-1", "main", "wm_set_a"))
	tt.runOther, _ = createTicket(t, s, run("ws1", "job-1", "other", "wm_set_a"))
	tt.otherRun, _ = createTicket(t, s, run("ws1", "job-2", "main", "wm_set_b"))
	tt.otherTenant, _ = createTicket(t, s, run("ws2", "job-1", "main", "wm_set_a"))
	return tt
}

// TestRevokeTicket: revoking one ticket (its decision no longer holds) touches that ticket
// only, and only once.
func TestRevokeTicket(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tt := createTenantTickets(t, s)
	ok, err := s.RevokeTicket(ctx, tt.run.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, usable(t, s, tt.run.ID))
	for _, id := range []string{tt.runOther.ID, tt.otherRun.ID, tt.otherTenant.ID} {
		require.True(t, usable(t, s, id))
	}
	ok, err = s.RevokeTicket(ctx, tt.run.ID)
	require.NoError(t, err)
	require.False(t, ok, "not live any more")
}

// TestRevokeTicketsOfRun: a run's revocation reaches its own tickets only. Job ids are unique
// per workspace, so another tenant's run with the same job id keeps its tickets.
func TestRevokeTicketsOfRun(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tt := createTenantTickets(t, s)

	ids, err := s.RevokeTicketsOfRun(ctx, "ws1", "job-1")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{tt.run.ID, tt.runOther.ID}, ids)
	for _, tc := range []struct {
		name string
		id   string
		want bool
	}{
		{"the run's ticket", tt.run.ID, false},
		{"the run's ticket of another data table", tt.runOther.ID, false},
		{"another run of the workspace", tt.otherRun.ID, true},
		{"the same job id in another workspace", tt.otherTenant.ID, true},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, usable(t, s, tc.id)) })
	}
	ids, err = s.RevokeTicketsOfRun(ctx, "ws1", "job-1")
	require.NoError(t, err)
	require.Empty(t, ids, "a ticket is revoked once: its sessions were ended the first time")
}

// TestRevokeTicketsWhere: a data table's revocation sees and revokes that data table's live
// tickets only, in its workspace only.
func TestRevokeTicketsWhere(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tt := createTenantTickets(t, s)

	var seen []string
	ids, err := s.RevokeTicketsWhere(ctx, "ws1", "main", func(tk ticket.Ticket) bool {
		seen = append(seen, tk.ID)
		return tk.Login == "wm_set_a"
	})
	require.NoError(t, err)
	require.Equal(t, []string{tt.run.ID}, ids)
	require.ElementsMatch(t, []string{tt.run.ID, tt.otherRun.ID}, seen, "match sees the data table's live tickets only")
	require.False(t, usable(t, s, tt.run.ID))
	require.True(t, usable(t, s, tt.otherRun.ID))

	ids, err = s.RevokeTicketsWhere(ctx, "ws1", "main", nil)
	require.NoError(t, err)
	require.Equal(t, []string{tt.otherRun.ID}, ids, "nil matches every live ticket of the data table")
	require.True(t, usable(t, s, tt.runOther.ID), "another data table of the workspace")
	require.True(t, usable(t, s, tt.otherTenant.ID), "the same data table name in another workspace")
}

// TestDeleteExpiredTickets: the cleanup removes expired tickets only, at most a batch a call.
func TestDeleteExpiredTickets(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for range 5 {
		tk, _ := createTicket(t, s, run("ws", "job-old", "main", "wm_set_a"))
		expire(t, s, tk.ID)
	}
	live, _ := createTicket(t, s, run("ws", "job-new", "main", "wm_set_a"))
	revoked, _ := createTicket(t, s, run("ws", "job-revoked", "main", "wm_set_a"))
	_, err := s.RevokeTicketsOfRun(ctx, "ws", "job-revoked")
	require.NoError(t, err)

	var got []int64
	for {
		n, err := s.DeleteExpiredTickets(ctx, time.Now(), 2)
		require.NoError(t, err)
		got = append(got, n)
		if n == 0 {
			break
		}
	}
	require.Equal(t, []int64{2, 2, 1, 0}, got)
	var left []string
	rows, err := s.Pool.Query(ctx, `SELECT id FROM ticket ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []string{live.ID, revoked.ID}, left, "a revoked ticket stays until it expires")
}

func TestCancelKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	k := store.CancelKey{ProxyPID: 4294967295, ProxySecret: []byte{1, 2, 3, 4}, UpstreamHost: "db.example", UpstreamPort: 5432,
		UpstreamPID: 1234, UpstreamSecret: []byte(strings.Repeat("s", 32))}
	require.NoError(t, s.PutCancelKey(ctx, k))
	sameSecret := k
	sameSecret.ProxyPID, sameSecret.UpstreamPID = 7, 99
	require.NoError(t, s.PutCancelKey(ctx, sameSecret), "a key is the pair: the same secret under another pid is another key")
	require.ErrorIs(t, s.PutCancelKey(ctx, k), store.ErrAlreadyExists)

	got, err := s.GetCancelKey(ctx, k.ProxyPID, k.ProxySecret)
	require.NoError(t, err)
	require.False(t, got.CreatedAt.IsZero())
	got.CreatedAt = time.Time{}
	require.Equal(t, k, got)

	for _, tc := range []struct {
		name   string
		pid    uint32
		secret []byte
	}{
		{"another pid", 1, k.ProxySecret},
		{"another secret", k.ProxyPID, []byte{1, 2, 3, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.GetCancelKey(ctx, tc.pid, tc.secret)
			require.ErrorIs(t, err, store.ErrNotFound)
		})
	}

	require.NoError(t, s.DeleteCancelKey(ctx, k.ProxyPID, k.ProxySecret))
	_, err = s.GetCancelKey(ctx, k.ProxyPID, k.ProxySecret)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetCancelKey(ctx, sameSecret.ProxyPID, sameSecret.ProxySecret)
	require.NoError(t, err, "deleting one key leaves the other")
	require.NoError(t, s.DeleteCancelKey(ctx, k.ProxyPID, k.ProxySecret), "deleting a missing key is no error")
}

// TestTicketMigrationDown: 00005's Down section removes both tables, and its Up section then
// makes them again (goose runs each section as it is written).
func TestTicketMigrationDown(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	raw, err := migrations.FS.ReadFile("00005_ticket.sql")
	require.NoError(t, err)
	up, down, ok := strings.Cut(string(raw), "-- +goose Down")
	require.True(t, ok)
	tables := func() (n int) {
		require.NoError(t, s.Pool.QueryRow(ctx,
			`SELECT count(*) FROM pg_tables WHERE tablename IN ('ticket', 'proxy_cancel_key')`).Scan(&n))
		return n
	}
	require.Equal(t, 2, tables())
	_, err = s.Pool.Exec(ctx, down)
	require.NoError(t, err)
	require.Zero(t, tables())
	_, err = s.Pool.Exec(ctx, up)
	require.NoError(t, err)
	require.Equal(t, 2, tables())
}
