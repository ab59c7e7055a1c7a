package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	rolesetv1 "github.com/millwright/millwright/pkg/gen/millwright/roleset/v1"
	"github.com/millwright/millwright/pkg/stream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	jobToken     = "job-token-1"
	serviceToken = "worker-service-token"
	secret       = "s3cr:et/p@ss?w&rd%20 é"
)

// fastRetry keeps retry tests quick.
var fastRetry = RetryPolicy{MaxAttempts: 5, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}

func eventProto(id int64, ws string) *commonv1.Event {
	return &commonv1.Event{Id: id, Kind: settingsKind, Workspace: ws, Key: ws, Op: "update", PayloadJson: `{}`}
}

func okResponse() *rolesetv1.ResolveConnectionResponse {
	return &rolesetv1.ResolveConnectionResponse{
		Host: "db.internal", Port: 5432, Database: "main", User: "wm_set_abc", Password: secret,
		Roles: []string{"sales", "support"}, Kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET,
	}
}

// newRolesetClient starts a fake roleset and a client on it.
func newRolesetClient(t *testing.T, f *fakeRoleset, retry RetryPolicy) *Client {
	t.Helper()
	srv := startFake(t, func(s *grpc.Server) { rolesetv1.RegisterConnectionServiceServer(s, f) })
	c, err := New(context.Background(), Options{RolesetConn: dialTest(t, srv.addr), Token: serviceToken, Retry: retry})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func TestResolveConnectionRetries(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "roleset restarting")
	conflict := errs.New(codes.Aborted, commonv1.ErrorReason_ERROR_REASON_CONFLICT_RETRY, "serialization failure", nil)
	busy := status.Error(codes.ResourceExhausted, "database busy; retry later")
	type retryCase struct {
		name      string
		failures  []error // returned by calls 1..n, then success
		wantCalls int
		wantCode  codes.Code
		reason    commonv1.ErrorReason
	}
	// notRetried is a refusal the client returns at once, code and reason as they came.
	notRetried := func(name string, code codes.Code, reason commonv1.ErrorReason, msg string) retryCase {
		return retryCase{name: name, failures: []error{errs.New(code, reason, msg, nil)}, wantCalls: 1, wantCode: code, reason: reason}
	}
	cases := []retryCase{
		{name: "unavailable then success", failures: []error{unavailable, unavailable}, wantCalls: 3},
		{name: "conflict retry then success", failures: []error{conflict}, wantCalls: 2},
		{name: "busy then success", failures: []error{busy}, wantCalls: 2},
		{name: "unavailable past the attempts", failures: []error{unavailable, unavailable, unavailable, unavailable, unavailable, unavailable}, wantCalls: 5, wantCode: codes.Unavailable},
		notRetried("permission denied is not retried", codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_ROLE, "no role's tenants name the viewer"),
		notRetried("no viewer is not retried", codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_NO_VIEWER, "the run has no viewer"),
		notRetried("invalid argument is not retried", codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_MALFORMED_REFERENCE, "bad reference"),
		notRetried("failed precondition is not retried, even with a conflict reason", codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_CONFLICT_RETRY, "login being retired"),
		{name: "aborted without the conflict reason is not retried",
			failures: []error{status.Error(codes.Aborted, "aborted")}, wantCalls: 1, wantCode: codes.Aborted},
		notRetried("unauthenticated is not retried", codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, "token revoked"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRoleset{script: func(_ context.Context, n int, _ *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error) {
				if n <= len(tc.failures) {
					return nil, tc.failures[n-1]
				}
				return okResponse(), nil
			}}
			c := newRolesetClient(t, f, fastRetry)
			conn, err := c.ResolveConnection(context.Background(), jobToken, "datatable://main?as=viewer")
			require.Equal(t, tc.wantCalls, f.count(), "calls")
			if tc.wantCode == codes.OK {
				require.NoError(t, err)
				require.Equal(t, "wm_set_abc", conn.User)
				require.Equal(t, secret, conn.Password)
				return
			}
			require.Error(t, err)
			require.Nil(t, conn)
			require.Equal(t, tc.wantCode, status.Code(err))
			require.Equal(t, tc.reason, Reason(err))
		})
	}
}

func TestResolveConnectionSendsJobTokenAsBearer(t *testing.T) {
	f := &fakeRoleset{script: func(context.Context, int, *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error) {
		return okResponse(), nil
	}}
	c := newRolesetClient(t, f, fastRetry)
	conn, err := c.ResolveConnection(context.Background(), jobToken, "datatable://main?as=viewer")
	require.NoError(t, err)
	require.Equal(t, Connection{Host: "db.internal", Port: 5432, Database: "main", User: "wm_set_abc", Password: secret,
		Roles: []string{"sales", "support"}, Kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET}, *conn)
	_, err = c.ResolveAgent(context.Background(), "job-token-2", "main", ViewerRole)
	require.NoError(t, err)

	f.mu.Lock()
	defer f.mu.Unlock()
	// Exactly one authorization header, the job's: never the worker's own token.
	require.Equal(t, [][]string{{"Bearer " + jobToken}, {"Bearer job-token-2"}}, f.auths)
	require.Equal(t, "datatable://main?as=viewer", f.reqs[0].GetReference())
	require.Empty(t, f.reqs[0].GetDatatable())
	require.Empty(t, f.reqs[1].GetReference())
	require.Equal(t, "main", f.reqs[1].GetDatatable())
	require.Equal(t, "$viewer", f.reqs[1].GetRole())
}

func TestResolveConnectionRefusesLocally(t *testing.T) {
	f := &fakeRoleset{script: func(context.Context, int, *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error) {
		return okResponse(), nil
	}}
	c := newRolesetClient(t, f, fastRetry)
	_, err := c.ResolveConnection(context.Background(), "", "datatable://main")
	require.ErrorContains(t, err, "job token is required")
	require.Zero(t, f.count(), "no call without a job token")

	noRoleset, err := New(context.Background(), Options{PolicyConn: dialTest(t, "127.0.0.1:1")})
	require.NoError(t, err)
	defer noRoleset.Close()
	_, err = noRoleset.ResolveConnection(context.Background(), jobToken, "datatable://main")
	require.ErrorContains(t, err, "roleset is not configured")

	_, err = New(context.Background(), Options{})
	require.Error(t, err, "a client with no service is a configuration error")
}

func TestResolveConnectionRespectsDeadline(t *testing.T) {
	cases := []struct {
		name   string
		script func(ctx context.Context) error
	}{
		{"unavailable forever", func(context.Context) error { return status.Error(codes.Unavailable, "down") }},
		{"server hangs", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRoleset{script: func(ctx context.Context, _ int, _ *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error) {
				return nil, tc.script(ctx)
			}}
			c := newRolesetClient(t, f, RetryPolicy{MaxAttempts: 1000, MinBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := c.ResolveConnection(ctx, jobToken, "datatable://main")
			elapsed := time.Since(start)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, elapsed, time.Second, "returned long after the deadline")
			require.GreaterOrEqual(t, elapsed, 150*time.Millisecond, "gave up before the deadline")
		})
	}
}

func TestResolveConnectionDialsAddress(t *testing.T) {
	f := &fakeRoleset{script: func(context.Context, int, *rolesetv1.ResolveConnectionRequest) (*rolesetv1.ResolveConnectionResponse, error) {
		return okResponse(), nil
	}}
	srv := startFake(t, func(s *grpc.Server) { rolesetv1.RegisterConnectionServiceServer(s, f) })
	c, err := New(context.Background(), Options{RolesetAddr: srv.addr, Token: serviceToken})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	conn, err := c.ResolveConnection(context.Background(), jobToken, "datatable://main")
	require.NoError(t, err)
	require.Equal(t, "wm_set_abc", conn.User)
	f.mu.Lock()
	require.Equal(t, []string{"Bearer " + jobToken}, f.auths[0])
	f.mu.Unlock()
}

func TestConnectionRedactsPassword(t *testing.T) {
	conn := Connection{Host: "db.internal", Port: 5432, Database: "main", User: "wm_set_abc", Password: secret,
		Roles: []string{"sales"}, Kind: rolesetv1.ConnectionKind_CONNECTION_KIND_ROLE_SET}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("resolved", "conn", conn, "ptr", &conn)
	var loggedJSON bytes.Buffer
	slog.New(slog.NewJSONHandler(&loggedJSON, nil)).Info("resolved", "conn", conn)
	marshalled, err := json.Marshal(conn)
	require.NoError(t, err)

	shown := map[string]string{
		"%v": fmt.Sprintf("%v", conn), "%+v": fmt.Sprintf("%+v", conn), "%#v": fmt.Sprintf("%#v", conn),
		"%s": fmt.Sprintf("%s", conn), "%q": fmt.Sprintf("%q", conn), "%x": fmt.Sprintf("%x", conn),
		"%d": fmt.Sprintf("%d", conn), "ptr %+v": fmt.Sprintf("%+v", &conn),
		"in a struct": fmt.Sprintf("%+v", struct{ C Connection }{conn}),
		"in a slice":  fmt.Sprint([]Connection{conn}),
		"String":      conn.String(), "error": fmt.Errorf("open %v: failed", conn).Error(),
		"slog text": logged.String(), "slog json": loggedJSON.String(), "json": string(marshalled),
	}
	for name, s := range shown {
		t.Run(name, func(t *testing.T) {
			for _, leak := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret), fmt.Sprintf("%x", secret)} {
				require.NotContains(t, s, leak)
			}
			require.NotContains(t, s, "s3cr")
			require.Contains(t, s, "wm_set_abc", "the rest stays visible")
		})
	}
	require.Contains(t, logged.String(), "conn.password="+redacted)

	t.Run("DSN carries the escaped password", func(t *testing.T) {
		dsn := conn.DSN()
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		pw, _ := u.User.Password()
		require.Equal(t, secret, pw)
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		require.Equal(t, secret, cfg.Password)
		require.Equal(t, "wm_set_abc", cfg.User)
		require.Equal(t, "db.internal", cfg.Host)
		require.Equal(t, uint16(5432), cfg.Port)
		require.Equal(t, "main", cfg.Database)
	})
	t.Run("DSN with an IPv6 host and an odd database name", func(t *testing.T) {
		c := Connection{Host: "::1", Port: 6543, Database: "my db/x", User: "u@x", Password: "p"}
		cfg, err := pgx.ParseConfig(c.DSN())
		require.NoError(t, err)
		require.Equal(t, "::1", cfg.Host)
		require.Equal(t, "my db/x", cfg.Database)
		require.Equal(t, "u@x", cfg.User)
	})
}

// policyFixture is a fake policy (settings + events) and a client following it.
type policyFixture struct {
	srv      *fakeServer
	settings *fakeSettings
	events   *fakeEvents
	c        *Client
}

func newPolicyFixture(t *testing.T, ttl time.Duration, silent bool) *policyFixture {
	t.Helper()
	p := &policyFixture{settings: newFakeSettings(), events: newFakeEvents()}
	p.events.silent = silent
	p.srv = startFake(t, func(s *grpc.Server) {
		policyv1.RegisterSettingsServiceServer(s, p.settings)
		policyv1.RegisterEventServiceServer(s, p.events)
	})
	c, err := New(context.Background(), Options{
		PolicyConn: dialTest(t, p.srv.addr), Token: serviceToken, Retry: fastRetry, BuilderTTL: ttl,
		WatchMinBackoff: 10 * time.Millisecond, WatchMaxBackoff: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	p.c = c
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return p
}

func (p *policyFixture) waitLive(t *testing.T) {
	t.Helper()
	require.Eventually(t, p.c.watcher.Live, 5*time.Second, time.Millisecond, "watch stream never became live")
}

// warm turns builder rights on in each workspace, waits for the watch to be live and reads
// each flag once (on), so the cache holds them.
func (p *policyFixture) warm(t *testing.T, workspaces ...string) {
	t.Helper()
	for _, ws := range workspaces {
		p.settings.set(ws, true)
	}
	p.waitLive(t)
	for _, ws := range workspaces {
		require.True(t, p.enabled(t, ws))
	}
}

func (p *policyFixture) enabled(t *testing.T, ws string) bool {
	t.Helper()
	v, err := p.c.BuilderEnabled(context.Background(), ws)
	require.NoError(t, err)
	return v
}

// requireInvalidated waits for ws's cached true to turn into the fake's false and returns how
// long it took.
func (p *policyFixture) requireInvalidated(t *testing.T, ws string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.Eventually(t, func() bool { return !p.enabled(t, ws) }, within, time.Millisecond,
		"the cached true outlived the settings event by more than %v", within)
	return time.Since(start)
}

// invalidationBound is the "~100 ms" of the brief with headroom for -race on a loaded host;
// the measured latency is logged (typically well under a millisecond on loopback).
const invalidationBound = 250 * time.Millisecond

func TestBuilderCache(t *testing.T) {
	t.Run("read once, then served from the cache", func(t *testing.T) {
		p := newPolicyFixture(t, 0, false)
		p.settings.set("w", true)
		p.waitLive(t)
		for range 5 {
			require.True(t, p.enabled(t, "w"))
		}
		require.False(t, p.enabled(t, "other"))
		require.Equal(t, 1, p.settings.readsOf("w"))
		require.Equal(t, 1, p.settings.readsOf("other"))

		p.events.mu.Lock()
		require.Equal(t, int64(-1), p.events.reqs[0].GetAfterId(), "watch from the head")
		require.Equal(t, []string{"settings"}, p.events.reqs[0].GetKinds())
		require.Equal(t, []string{"Bearer " + serviceToken}, p.events.auths[0])
		p.events.mu.Unlock()
		p.settings.mu.Lock()
		require.Equal(t, []string{"Bearer " + serviceToken}, p.settings.auths[0])
		p.settings.mu.Unlock()
	})

	t.Run("a settings event drops the entry", func(t *testing.T) {
		p := newPolicyFixture(t, 0, false)
		p.warm(t, "w", "keep")

		p.settings.set("w", false)
		p.events.publish("w")
		took := p.requireInvalidated(t, "w", invalidationBound)
		t.Logf("invalidated %v after the event was sent", took)
		require.Equal(t, 2, p.settings.readsOf("w"))
		require.True(t, p.enabled(t, "keep"))
		require.Equal(t, 1, p.settings.readsOf("keep"), "another workspace's entry stays")
	})

	t.Run("reconnects after the stream breaks and still invalidates", func(t *testing.T) {
		p := newPolicyFixture(t, 0, false)
		p.warm(t, "w")

		p.srv.stop()
		require.Eventually(t, func() bool { return !p.c.watcher.Live() }, 5*time.Second, time.Millisecond,
			"a broken stream must stop the cache from answering")
		require.Zero(t, p.c.builder.Len(), "entries dropped when the stream broke")
		p.srv.start()
		p.waitLive(t)
		require.GreaterOrEqual(t, p.events.opens(), 2)

		require.True(t, p.enabled(t, "w"))
		require.Equal(t, 2, p.settings.readsOf("w"), "re-read after the reconnect")
		require.True(t, p.enabled(t, "w"))
		require.Equal(t, 2, p.settings.readsOf("w"), "cached again on the new stream")
		p.settings.set("w", false)
		p.events.publish("w")
		took := p.requireInvalidated(t, "w", invalidationBound)
		t.Logf("invalidated %v after the event was sent on the new stream", took)
	})

	t.Run("resync drops every entry", func(t *testing.T) {
		p := newPolicyFixture(t, 0, false)
		p.warm(t, "a", "b")
		require.Equal(t, 2, p.c.builder.Len())

		opens := p.events.opens()
		p.events.end((&stream.ResyncError{OldestID: 7}).GRPCStatus().Err())
		require.Eventually(t, func() bool { return p.c.watcher.Resyncs() == 1 }, 5*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return p.events.opens() > opens }, 5*time.Second, time.Millisecond)
		p.waitLive(t)
		require.True(t, p.enabled(t, "a"))
		require.True(t, p.enabled(t, "b"))
		require.Equal(t, 2, p.settings.readsOf("a"))
		require.Equal(t, 2, p.settings.readsOf("b"))
	})

	t.Run("an instance-wide settings event drops every entry", func(t *testing.T) {
		p := newPolicyFixture(t, 0, false)
		p.warm(t, "a")
		p.settings.set("a", false)
		p.events.publish("")
		p.requireInvalidated(t, "a", invalidationBound)
	})

	t.Run("a read racing an invalidation is not cached", func(t *testing.T) {
		p := newPolicyFixture(t, 0, false)
		p.settings.set("w", true)
		p.waitLive(t)
		inRead, release := make(chan struct{}), make(chan struct{})
		p.settings.mu.Lock()
		p.settings.hold = func(string) { close(inRead); <-release }
		p.settings.mu.Unlock()

		got := make(chan bool, 1)
		go func() {
			v, _ := p.c.BuilderEnabled(context.Background(), "w")
			got <- v
		}()
		<-inRead // the server has taken "true"; the flag now turns off and the event is delivered
		p.settings.mu.Lock()
		p.settings.hold = nil
		p.settings.builder["w"] = false
		p.settings.mu.Unlock()
		pos := p.c.watcher.Position()
		p.events.publish("w")
		require.Eventually(t, func() bool { return p.c.watcher.Position() != pos }, 5*time.Second, time.Millisecond)
		close(release)
		require.True(t, <-got, "the in-flight read answers what it read")
		require.False(t, p.enabled(t, "w"), "but its stale true was not cached")
		require.Equal(t, 2, p.settings.readsOf("w"))
	})

	t.Run("reads through until the stream is live", func(t *testing.T) {
		p := newPolicyFixture(t, 0, true) // the fake never sends a first message
		p.settings.set("w", true)
		require.Eventually(t, func() bool { return p.events.opens() >= 1 }, 5*time.Second, time.Millisecond)
		for range 3 {
			require.True(t, p.enabled(t, "w"))
		}
		require.Equal(t, 3, p.settings.readsOf("w"))
		require.False(t, p.c.watcher.Live())
	})

	t.Run("entries expire after the TTL", func(t *testing.T) {
		p := newPolicyFixture(t, 30*time.Millisecond, false)
		p.warm(t, "w")
		require.True(t, p.enabled(t, "w"))
		require.Equal(t, 1, p.settings.readsOf("w"))
		time.Sleep(50 * time.Millisecond)
		require.True(t, p.enabled(t, "w"))
		require.Equal(t, 2, p.settings.readsOf("w"))
	})

	t.Run("the TTL is capped at 60 s", func(t *testing.T) {
		for _, ttl := range []time.Duration{0, time.Hour} {
			c, err := New(context.Background(), Options{PolicyConn: dialTest(t, "127.0.0.1:1"), BuilderTTL: ttl,
				Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.Equal(t, MaxBuilderTTL, c.builderTTL)
			require.NoError(t, c.Close())
		}
	})

	t.Run("errors are returned and not cached", func(t *testing.T) {
		p := newPolicyFixture(t, 0, false)
		p.waitLive(t)
		p.srv.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := p.c.BuilderEnabled(ctx, "w")
		require.Error(t, err)
		require.True(t, status.Code(err) == codes.Unavailable || errors.Is(err, context.DeadlineExceeded), "got %v", err)
		require.Zero(t, p.c.builder.Len())
	})
}

func TestCloseIsIdempotent(t *testing.T) {
	c, err := New(context.Background(), Options{RolesetAddr: "127.0.0.1:1", PolicyAddr: "127.0.0.1:1",
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
}

func TestRetryDelayIsBoundedAndJittered(t *testing.T) {
	p := RetryPolicy{MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond}.withDefaults()
	seen := map[time.Duration]bool{}
	for n := range 100 {
		d := p.delay(n % 40)
		require.GreaterOrEqual(t, d, 5*time.Millisecond)
		require.LessOrEqual(t, d, 80*time.Millisecond)
		seen[d] = true
	}
	require.Greater(t, len(seen), 10, "delays are jittered")
	require.Equal(t, 5, p.MaxAttempts, "default attempts")
}
