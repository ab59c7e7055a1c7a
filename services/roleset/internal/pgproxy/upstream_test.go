package pgproxy

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/pkg/pgtest"
	"github.com/millwright/millwright/services/roleset/internal/secret"
)

// dialWith points testUser's sessions at the fixture's upstream login with the connection
// string's settings overridden by extra ("sslmode=require", "password=...").
func (f *fixture) dialWith(t testing.TB, extra string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(f.upstream + " " + extra)
	require.NoError(t, err)
	e := f.auth.users[testUser]
	e.target.Dial = DialConfig(cfg)
	f.auth.set(testUser, e)
}

// TestUpstreamConnect connects through the proxy with each way the upstream may be reached,
// against the shared cluster (no TLS) and a cluster with TLS, and checks on the session
// itself who it runs as and whether its upstream leg is TLS.
func TestUpstreamConnect(t *testing.T) {
	plain := newFixture(t, Config{})
	withTLS := newFixtureOn(t, pgtest.NewCluster(t, pgtest.ClusterOptions{TLS: true}), "disable", Config{})
	var sockets string
	require.NoError(t, plain.super.QueryRow(context.Background(), `SHOW unix_socket_directories`).Scan(&sockets))
	cases := []struct {
		name    string
		f       *fixture
		extra   string
		wantTLS bool
		code    string // the SQLSTATE the client gets; "": connected
	}{
		{"no TLS server, sslmode=disable", plain, "sslmode=disable", false, ""},
		{"no TLS server, sslmode=prefer falls back", plain, "sslmode=prefer", false, ""},
		{"no TLS server, sslmode=require refused", plain, "sslmode=require", false, "08006"},
		{"unix socket", plain, "host=" + strings.Split(sockets, ",")[0] + " sslmode=disable", false, ""},
		{"wrong password forwarded", plain, "password=not-it", false, "28P01"},
		{"unknown database forwarded", plain, "dbname=no_such_db", false, "3D000"},
		{"TLS server, sslmode=disable", withTLS, "sslmode=disable", false, ""},
		{"TLS server, sslmode=prefer", withTLS, "sslmode=prefer", true, ""},
		{"TLS server, sslmode=require", withTLS, "sslmode=require", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.dialWith(t, tc.extra)
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, tc.f.dsn(testUser, testPassword, "disable"))
			if tc.code != "" {
				require.Error(t, err)
				require.Equal(t, tc.code, pgCode(err), err.Error())
				return
			}
			require.NoError(t, err)
			defer conn.Close(ctx)
			var user string
			var ssl bool
			require.NoError(t, conn.QueryRow(ctx,
				`SELECT current_user, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&user, &ssl))
			require.Equal(t, tc.f.login, user)
			require.Equal(t, tc.wantTLS, ssl, "TLS between the proxy and the server")
		})
	}
}

// TestUpstreamPasswordChange: after a connect has cached the login's keys, a new password
// (ALTER ROLE: new salt too) works at once and the old one no longer does.
func TestUpstreamPasswordChange(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	f.connect(t, "disable") // the old password's keys are cached
	newPassword := secret.NewPassword()
	_, err := f.super.Exec(ctx, fmt.Sprintf(`ALTER ROLE %s PASSWORD '%s'`, f.login,
		secret.ScramVerifier(newPassword, secret.DefaultIterations)))
	require.NoError(t, err)

	_, err = pgx.Connect(ctx, f.dsn(testUser, testPassword, "disable"))
	require.Error(t, err)
	require.Equal(t, "28P01", pgCode(err), "the old password: %v", err)

	f.dialWith(t, "password="+newPassword)
	conn := f.connect(t, "disable")
	var user string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_user`).Scan(&user))
	require.Equal(t, f.login, user)
}

func TestKeyCache(t *testing.T) {
	c := newKeyCache(4)
	salt := []byte("0123456789abcdef")
	got, err := c.get("pw", salt, 8)
	require.NoError(t, err)
	clientKey, serverKey, err := secret.ScramClientKeys("pw", salt, 8)
	require.NoError(t, err)
	require.Equal(t, clientKey, got.clientKey)
	require.Equal(t, serverKey, got.serverKey)

	again, err := c.get("pw", salt, 8)
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Equal(t, 1, c.len(), "the same inputs hit")

	// Any input changed is another entry, with other keys.
	for i, in := range []struct {
		password string
		salt     []byte
		iter     int
	}{{"pw2", salt, 8}, {"pw", []byte("another salt"), 8}, {"pw", salt, 9}} {
		k, err := c.get(in.password, in.salt, in.iter)
		require.NoError(t, err)
		require.NotEqual(t, got.clientKey, k.clientKey)
		require.Equal(t, 2+i, c.len())
	}

	for i := range 20 {
		_, err := c.get(fmt.Sprint("pw", i), salt, 1)
		require.NoError(t, err)
		require.LessOrEqual(t, c.len(), 4, "bounded")
	}

}

// fakeUpstream is a server on a local port that speaks the backend side of the protocol as
// serve does, one goroutine per connection, all ended with the test. It returns a
// configuration (sslmode=disable) that logs in to it as "u" with password "pw".
func fakeUpstream(t *testing.T, serve func(net.Conn)) *pgconn.Config {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=u password=pw dbname=db sslmode=disable application_name=pinned",
		ln.Addr().(*net.TCPAddr).Port))
	require.NoError(t, err)
	return cfg
}

func TestFakeUpstream(t *testing.T) {
	keys, err := secret.ParseScramVerifier(secret.ScramVerifier("pw", secret.DefaultIterations))
	require.NoError(t, err)
	// An impostor: it can check the client's proof (StoredKey) but not sign (ServerKey).
	impostor := keys
	impostor.ServerKey = make([]byte, len(keys.ServerKey))
	_, _ = rand.Read(impostor.ServerKey)

	ready := []pgproto3.Message{
		&pgproto3.AuthenticationOk{},
		&pgproto3.ParameterStatus{Name: "server_version", Value: "15.99"},
		&pgproto3.BackendKeyData{ProcessID: 4242, SecretKey: []byte{1, 2, 3, 4}},
		&pgproto3.ReadyForQuery{TxStatus: 'I'},
	}
	scram := func(keys secret.ScramKeys) func(net.Conn) error {
		return func(c net.Conn) error {
			ok, err := scramExchange(c, keys)
			if err != nil || !ok {
				return send(c, &pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"})
			}
			return send(c, ready...)
		}
	}
	reply := func(msgs ...pgproto3.Message) func(net.Conn) error {
		return func(c net.Conn) error { return send(c, msgs...) }
	}
	cases := []struct {
		name   string
		answer func(net.Conn) error // after the StartupMessage; nil: never
		err    string               // in the error; "": connected
		code   string               // the error's SQLSTATE
	}{
		{"SCRAM", scram(keys), "", ""},
		{"trust", reply(ready...), "", ""},
		{"wrong server signature", scram(impostor), "does not hold the login's verifier", ""},
		{"md5", reply(&pgproto3.AuthenticationMD5Password{Salt: [4]byte{1, 2, 3, 4}}), "SCRAM-SHA-256 only", ""},
		{"cleartext", reply(&pgproto3.AuthenticationCleartextPassword{}), "SCRAM-SHA-256 only", ""},
		{"other SASL mechanism", reply(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"OAUTHBEARER"}}), "OAUTHBEARER", ""},
		{"error response", reply(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "53300", Message: "too many"}), "too many", "53300"},
		{"ready before authentication", reply(ready[1:]...), "before AuthenticationOk", ""},
		{"silent", nil, "timeout", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			startups := make(chan startup, 1)
			cfg := fakeUpstream(t, func(c net.Conn) {
				st, err := readStartup(c)
				if err != nil {
					return
				}
				startups <- st
				if tc.answer != nil && tc.answer(c) != nil {
					return
				}
				_, _ = io.Copy(io.Discard, c) // until the client hangs up
			})
			const timeout = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			before := runtime.NumGoroutine()
			start := time.Now()
			b, err := DialConfig(cfg)(ctx, map[string]string{"application_name": "client", "DateStyle": "ISO"})
			st := <-startups
			require.Equal(t, map[string]string{"user": "u", "database": "db", "application_name": "pinned", "DateStyle": "ISO"},
				st.params, "the client's parameters, the configuration's winning")
			if tc.err != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.err)
				require.Equal(t, tc.code, pgCode(err))
				require.Less(t, time.Since(start), timeout+100*time.Millisecond, "within the deadline")
				requireGoroutines(t, before)
				return
			}
			require.NoError(t, err)
			defer b.Conn.Close()
			require.Equal(t, &Backend{Conn: b.Conn, PID: 4242, SecretKey: []byte{1, 2, 3, 4},
				ParameterStatuses: map[string]string{"server_version": "15.99"}, TxStatus: 'I'}, b)
		})
	}
}

func TestDialConfigUnsupported(t *testing.T) {
	for _, setting := range []string{"channel_binding=require", "require_auth=scram-sha-256"} {
		t.Run(setting, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig("host=127.0.0.1 port=1 user=u password=pw sslmode=require " + setting)
			require.NoError(t, err)
			_, err = DialConfig(cfg)(context.Background(), nil)
			require.ErrorContains(t, err, "not supported")
		})
	}
}
