package pgproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/roleset/internal/secret"
)

func TestCloseSessions(t *testing.T) {
	cases := []struct {
		name      string
		terminate bool
	}{
		{"terminate hook", true},
		{"no hook: cancel and close", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			if !tc.terminate {
				e := f.auth.users[testUser]
				e.target.Terminate = nil
				f.auth.set(testUser, e)
			}
			ctx := context.Background()
			conn := f.connect(t, "disable")
			second := f.connect(t, "disable")
			var pid uint32
			require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			var otherPID uint32
			require.NoError(t, second.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID))

			// Both sessions of the ticket end, their backends with them.
			start := time.Now()
			n := f.srv.CloseSessions(func(b Binding) bool { return b.JobID == "job-1" && b.TicketID == testUser })
			require.Equal(t, 2, n)
			for !f.backendGone(t, pid) || !f.backendGone(t, otherPID) {
				require.Less(t, time.Since(start), 100*time.Millisecond, "backends still in pg_stat_activity")
				time.Sleep(5 * time.Millisecond)
			}
			_, err := conn.Exec(ctx, `SELECT 1`)
			require.Error(t, err, "the client's connection has ended")
			require.Zero(t, f.srv.CloseSessions(func(Binding) bool { return true }), "nothing left to close")
		})
	}

	t.Run("only matching sessions", func(t *testing.T) {
		f := newFixture(t, Config{})
		conn := f.connect(t, "disable")
		require.Zero(t, f.srv.CloseSessions(func(b Binding) bool { return b.JobID == "job-2" }))
		_, err := conn.Exec(context.Background(), `SELECT 1`)
		require.NoError(t, err)
	})
}

func TestUpstreamFaults(t *testing.T) {
	// A closed port refuses at once; a listener that never answers makes the dial wait for
	// its deadline.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cases := []struct{ name, addr string }{
		{"unreachable", closedAddr},
		{"silent", silent.Addr().String()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = time.Second
			f := newFixture(t, Config{StartupTimeout: timeout})
			host, port, _ := net.SplitHostPort(tc.addr)
			cfg, err := pgconn.ParseConfig("host=" + host + " port=" + port + " user=x password=y sslmode=disable")
			require.NoError(t, err)
			f.auth.set("t_bob", authEntry{
				verifier: secret.ScramVerifier("bob", secret.DefaultIterations),
				target:   Target{Dial: DialConfig(cfg), Bind: Binding{TicketID: "t_bob"}},
			})
			before := runtime.NumGoroutine()
			start := time.Now()
			_, err = pgx.Connect(context.Background(), f.dsn("t_bob", "bob", "disable"))
			require.Error(t, err)
			require.Equal(t, "08006", pgCode(err), err.Error())
			require.Less(t, time.Since(start), timeout)
			requireGoroutines(t, before)
		})
	}
}

// requireGoroutines waits (a little) for the goroutine count to come back to before.
func requireGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMaxSessions(t *testing.T) {
	f := newFixture(t, Config{MaxSessions: 1})
	f.connect(t, "disable")
	_, err := pgx.Connect(context.Background(), f.dsn(testUser, testPassword, "disable"))
	require.Equal(t, "53300", pgCode(err), "%v", err)
}

// withLen is a start-up packet: its length word, then body.
func withLen(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(4+len(body))), body...)
}

// code is a start-up packet's code word (protocol version or request code).
func code(c uint32) []byte { return binary.BigEndian.AppendUint32(nil, c) }

func TestMalformedStartup(t *testing.T) {
	const timeout = time.Second
	f := newFixture(t, Config{StartupTimeout: timeout, TLS: selfSignedTLS(t)})
	v30 := code(protocol30)
	cases := []struct {
		name string
		send []byte
		code string // of the ErrorResponse; "": only the close
	}{
		{"too long", binary.BigEndian.AppendUint32(nil, 1<<20), "08P01"},
		{"too short", binary.BigEndian.AppendUint32(nil, 4), "08P01"},
		{"protocol 2.0", withLen(append(code(2<<16), "user\x00x\x00\x00"...)), "08P01"},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "08P01"},
		{"no terminator", withLen(append(v30, "user\x00x\x00"...)), "08P01"},
		{"no user", withLen(append(v30, "database\x00x\x00\x00"...)), "08P01"},
		{"duplicate user", withLen(append(v30, "user\x00x\x00user\x00y\x00\x00"...)), "08P01"},
		{"replication", withLen(append(v30, "user\x00x\x00replication\x00true\x00\x00"...)), "08P01"},
		{"SSLRequest with a body", withLen(append(code(sslRequestCode), 0)), "08P01"},
		{"cancel with a long key", withLen(append(code(cancelRequestCode), make([]byte, 40)...)), "08P01"},
		{"cancel with an unknown key", withLen(append(code(cancelRequestCode), make([]byte, 8)...)), ""},
		{"cut short", withLen(append(v30, "user\x00x\x00\x00"...))[:10], "08006"},
		{"nothing", nil, "08006"},
		{"GSSENC twice", append(withLen(code(gssEncRequestCode)), withLen(code(gssEncRequestCode))...), "08P01"},
		{"SASL garbage", append(withLen(append(v30, "user\x00"+testUser+"\x00\x00"...)), "p\x00\x00\x00\x08abcd"...), "08P01"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", f.addr.String())
			require.NoError(t, err)
			defer conn.Close()
			_, err = conn.Write(tc.send)
			require.NoError(t, err)
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(timeout+time.Second)))
			r := bufio.NewReader(conn)
			got := ""
			for {
				b, err := r.ReadByte()
				if err != nil {
					require.ErrorIs(t, err, io.EOF, "the proxy closes the connection, it does not hang")
					break
				}
				if b != 'E' {
					continue // 'N' for GSSENC, AuthenticationSASL, ...
				}
				var hdr [4]byte
				_, err = io.ReadFull(r, hdr[:])
				require.NoError(t, err)
				body := make([]byte, binary.BigEndian.Uint32(hdr[:])-4)
				_, err = io.ReadFull(r, body)
				require.NoError(t, err)
				for f := range bytes.SplitSeq(body, []byte{0}) {
					if c, ok := bytes.CutPrefix(f, []byte("C")); ok {
						got = string(c)
					}
				}
			}
			require.Equal(t, tc.code, got)
		})
	}
}
