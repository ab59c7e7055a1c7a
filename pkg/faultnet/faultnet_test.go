package faultnet

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves a TCP echo on loopback until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	p, err := Listen(echo(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func connect(t *testing.T, p *Proxy) net.Conn {
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads it back within limit, returning how long it took.
func roundTrip(c net.Conn, msg string, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(limit))
	if _, err := c.Write([]byte(msg)); err != nil {
		return 0, err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return 0, err
	}
	if string(buf) != msg {
		return 0, errors.New("echo mismatch: " + string(buf))
	}
	return time.Since(start), nil
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

func TestForwards(t *testing.T) {
	p := start(t)
	c := connect(t, p)
	_, err := roundTrip(c, "hello", time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, p.Conns())
}

func TestLatencyPerDirection(t *testing.T) {
	for _, tc := range []struct {
		name     string
		up, down time.Duration
	}{
		{"up", 150 * time.Millisecond, 0},
		{"down", 0, 150 * time.Millisecond},
		{"both", 100 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t)
			c := connect(t, p)
			p.SetLatency(Up, tc.up)
			p.SetLatency(Down, tc.down)
			took, err := roundTrip(c, "slow", 5*time.Second)
			require.NoError(t, err)
			require.GreaterOrEqual(t, took, tc.up+tc.down)
			p.Heal()
			took, err = roundTrip(c, "fast", 5*time.Second)
			require.NoError(t, err)
			require.Less(t, took, 100*time.Millisecond)
		})
	}
}

// TestStallThenHeal: a stalled connection stays open and silent; on heal what was held back
// arrives, as TCP's retransmissions would deliver it.
func TestStallThenHeal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*Proxy)
	}{
		{"stall", (*Proxy).Stall},
		{"partition", (*Proxy).Partition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t)
			c := connect(t, p)
			_, err := roundTrip(c, "before", time.Second)
			require.NoError(t, err)
			tc.fault(p)
			_, err = roundTrip(c, "held", 200*time.Millisecond)
			require.True(t, isTimeout(err), "got %v", err)
			require.Equal(t, 1, p.Conns(), "the connection is kept")
			p.Heal()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 4)
			_, err = io.ReadFull(c, buf)
			require.NoError(t, err)
			require.Equal(t, "held", string(buf))
		})
	}
}

// TestPartitionBlackHolesNewConnections: a connection made during a partition is accepted
// but gets nothing through until the heal, then works.
func TestPartitionBlackHolesNewConnections(t *testing.T) {
	p := start(t)
	p.Partition()
	c := connect(t, p)
	_, err := roundTrip(c, "ping", 200*time.Millisecond)
	require.True(t, isTimeout(err), "got %v", err)
	p.Heal()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))
	_, err = roundTrip(c, "again", time.Second)
	require.NoError(t, err)
}

// TestStallHoldsNewConnections: a stall holds the bytes of connections made during it too.
func TestStallHoldsNewConnections(t *testing.T) {
	p := start(t)
	p.Stall()
	c := connect(t, p)
	_, err := roundTrip(c, "ping", 200*time.Millisecond)
	require.True(t, isTimeout(err), "got %v", err)
	p.Heal()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
}

// TestResetAndRefuse: both end open connections with ECONNRESET, not a clean EOF. After a
// Reset new connections work at once; under Refuse they are reset too, until the heal.
func TestResetAndRefuse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   func(*Proxy)
		refuses bool
	}{
		{"reset", (*Proxy).Reset, false},
		{"refuse", (*Proxy).Refuse, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t)
			c := connect(t, p)
			_, err := roundTrip(c, "before", time.Second)
			require.NoError(t, err)
			tc.fault(p)
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Read(make([]byte, 1))
			require.ErrorIs(t, err, syscall.ECONNRESET)
			if tc.refuses {
				c2 := connect(t, p) // the kernel completes the handshake; the proxy resets it at accept
				_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
				_, err = c2.Read(make([]byte, 1))
				require.ErrorIs(t, err, syscall.ECONNRESET)
				p.Heal()
			} else {
				require.Eventually(t, func() bool { return p.Conns() == 0 }, time.Second, 5*time.Millisecond)
			}
			_, err = roundTrip(connect(t, p), "after", time.Second)
			require.NoError(t, err)
		})
	}
}

// TestCloseEndsEverything: Close ends held and black-holed connections and their goroutines
// (TestMain's goleak check fails the package otherwise).
func TestCloseEndsEverything(t *testing.T) {
	p, err := Listen(echo(t))
	require.NoError(t, err)
	c := connect(t, p)
	_, err = roundTrip(c, "x", time.Second)
	require.NoError(t, err)
	p.Partition()
	connect(t, p)
	require.Eventually(t, func() bool { return p.Conns() == 2 }, time.Second, 5*time.Millisecond)
	require.NoError(t, p.Close())
	require.Zero(t, p.Conns())
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err)
}
