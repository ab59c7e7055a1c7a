package pgproxy

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzStartup feeds the start-up reader arbitrary first packets (length word included): it
// must return a start-up or an error, never panic, and what it returns must hold its
// invariants.
func FuzzStartup(f *testing.F) {
	v30 := code(protocol30)
	for _, seed := range [][]byte{
		withLen(append(v30, "user\x00alice\x00database\x00db\x00\x00"...)),
		withLen(append(v30, "user\x00alice\x00options\x00-c a=b\x00_pq_.x\x00y\x00\x00"...)),
		withLen(append(code(3<<16|2), "user\x00alice\x00\x00"...)),
		withLen(code(sslRequestCode)),
		withLen(code(gssEncRequestCode)),
		withLen(append(code(cancelRequestCode), 0, 0, 0, 7, 1, 2, 3, 4)),
		withLen(append(code(2<<16), "user\x00x\x00\x00"...)),
		withLen(append(v30, "user\x00x\x00"...)),
		{0, 0, 0, 4},
		{0xff, 0xff, 0xff, 0xff},
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, packet []byte) {
		st, err := readStartup(bytes.NewReader(packet))
		if err != nil {
			return
		}
		if n := binary.BigEndian.Uint32(packet); n < 8 || n > maxStartupLen {
			t.Fatalf("accepted a packet of length %d", n)
		}
		if st.kind == kindStartup && (st.params["user"] == "" || st.params["database"] == "") {
			t.Fatalf("start-up without user or database: %q", st.params)
		}
		if _, ok := st.params["replication"]; ok {
			t.Fatal("replication accepted")
		}
	})
}
