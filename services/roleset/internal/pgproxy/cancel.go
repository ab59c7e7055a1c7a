package pgproxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
)

// CancelKey is the (process id, secret) the proxy gives a client in its BackendKeyData: its
// own, so the upstream's pair never reaches the client.
type CancelKey struct {
	PID    uint32
	Secret uint32
}

// CancelTarget is where a cancel for a CancelKey goes: the upstream server's address and the
// upstream backend's own key.
type CancelTarget struct {
	Network, Address string
	PID              uint32
	Secret           []byte
}

// CancelKeys maps the proxy's cancel keys to upstream targets. A client may send its cancel
// request to another replica than the one holding its session, so a deployment with several
// replicas needs a shared implementation (a table); MemoryCancelKeys serves one replica.
type CancelKeys interface {
	Put(ctx context.Context, key CancelKey, target CancelTarget) error
	// Get returns ok=false for a key it does not hold; the request is then dropped, as
	// PostgreSQL drops a cancel with a wrong key.
	Get(ctx context.Context, key CancelKey) (target CancelTarget, ok bool, err error)
	Delete(ctx context.Context, key CancelKey) error
}

// MemoryCancelKeys is a CancelKeys in this process's memory.
type MemoryCancelKeys struct {
	mu sync.Mutex
	m  map[CancelKey]CancelTarget
}

func NewMemoryCancelKeys() *MemoryCancelKeys {
	return &MemoryCancelKeys{m: map[CancelKey]CancelTarget{}}
}

func (k *MemoryCancelKeys) Put(_ context.Context, key CancelKey, t CancelTarget) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = t
	return nil
}

func (k *MemoryCancelKeys) Get(_ context.Context, key CancelKey) (CancelTarget, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.m[key]
	return t, ok, nil
}

func (k *MemoryCancelKeys) Delete(_ context.Context, key CancelKey) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
	return nil
}

// newCancelKey returns a random key. The process id is kept positive as an int32: clients
// (libpq) store it in an int.
func newCancelKey() CancelKey {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return CancelKey{
		PID:    binary.BigEndian.Uint32(b[:4])&0x7fffffff | 1,
		Secret: binary.BigEndian.Uint32(b[4:]),
	}
}

// sendCancel sends t's upstream a CancelRequest with the upstream's own key and waits for the
// server to close the connection (it answers nothing), within ctx.
func sendCancel(ctx context.Context, t CancelTarget) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, t.Network, t.Address)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	buf, err := (&pgproto3.CancelRequest{ProcessID: t.PID, SecretKey: t.Secret}).Encode(nil)
	if err != nil {
		return err
	}
	if _, err := conn.Write(buf); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, conn)
	return err
}
