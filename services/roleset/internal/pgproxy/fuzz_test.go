package pgproxy

import (
	"bytes"
	"encoding/binary"
	"strings"
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

// FuzzServerFirst feeds the SCRAM client's parser arbitrary server-first messages (what an
// upstream answers the proxy): it must return the parts or an error, never panic, and the
// parts must hold its invariants.
func FuzzServerFirst(f *testing.F) {
	const clientNonce = "rOprNGfwEbeRWgbNEkqO"
	for _, seed := range []string{
		"r=" + clientNonce + "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
		"r=" + clientNonce + "x,s=c2FsdA==,i=1,ext=1",
		"r=" + clientNonce + ",s=c2FsdA==,i=4096", // the nonce not extended
		"r=other" + clientNonce + ",s=c2FsdA==,i=4096",
		"r=" + clientNonce + "x,s=,i=4096",
		"r=" + clientNonce + "x,s=c2FsdA==,i=0",
		"r=" + clientNonce + "x,s=c2FsdA==,i=-1",
		"r=" + clientNonce + "x,s=not base64,i=4096",
		"r=" + clientNonce + "x,i=4096,s=c2FsdA==",
		"e=other-error",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		nonce, salt, iterations, err := parseServerFirst(msg, clientNonce)
		if err != nil {
			return
		}
		if !strings.HasPrefix(nonce, clientNonce) || len(nonce) == len(clientNonce) || strings.Contains(nonce, ",") {
			t.Fatalf("nonce %q accepted", nonce)
		}
		if len(salt) == 0 || iterations < 1 {
			t.Fatalf("salt %x, iterations %d accepted", salt, iterations)
		}
	})
}
