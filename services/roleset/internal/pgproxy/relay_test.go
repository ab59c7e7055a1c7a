package pgproxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// copyTLS passes every write on at once and whole, whatever its size against TLS records and
// its buffers: a byte it held back would wait for the peer's next message, which may never come.
func TestCopyTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cfg := selfSignedTLS(t)
	out, in := net.Pipe()
	defer out.Close()
	done := make(chan struct{})
	go func() { // the server's handshake happens in copyTLS's first read
		defer close(done)
		defer in.Close()
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		server := tls.Server(raw, cfg)
		defer server.Close()
		copyTLS(in, server)
	}()
	client, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own self-signed server
	require.NoError(t, err)
	defer client.Close()

	for _, size := range []int{1, 5, relayBufferSize - 1, relayBufferSize, relayBufferSize + 1, 100_000} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		go func() { _, _ = client.Write(msg) }()
		got := make([]byte, size)
		require.NoError(t, out.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := io.ReadFull(out, got)
		require.NoError(t, err, "size %d", size)
		require.Equal(t, msg, got, "size %d", size)
	}
	require.NoError(t, client.Close())
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("copyTLS did not end with its source")
	}
}
