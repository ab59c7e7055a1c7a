package pgproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// Codes of the first packet a client sends (PostgreSQL protocol, "Message Formats").
const (
	protocol30        = 3 << 16
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	cancelRequestCode = 80877102

	// maxStartupLen bounds the first packet (length word included): PostgreSQL's own bound
	// (MAX_STARTUP_PACKET_LENGTH), so nothing a real client sends is refused.
	maxStartupLen = 10000
)

type startupKind int

const (
	kindStartup startupKind = iota
	kindSSL
	kindGSSEnc
	kindCancel
)

// startup is a parsed first packet.
type startup struct {
	kind startupKind
	// kindStartup: the protocol's minor version (major is 3), the parameters, and the
	// protocol options ("_pq_.*") we do not support (all of them), to be named in a
	// NegotiateProtocolVersion.
	minor   uint16
	params  map[string]string
	options []string
	cancel  CancelKey // kindCancel
}

// protocolError is a malformed or unsupported start-up: the client gets SQLSTATE 08P01 with
// this message, which says nothing the client did not send.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

func protoErrorf(format string, args ...any) error {
	return &protocolError{fmt.Sprintf(format, args...)}
}

// readStartup reads one start-up packet with no read-ahead: after an SSLRequest the next
// bytes belong to the TLS handshake, and bytes a client sent before it must not be taken as
// if they had come encrypted.
func readStartup(r io.Reader) (startup, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return startup{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > maxStartupLen {
		return startup{}, protoErrorf("invalid length of startup packet")
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return startup{}, err
	}
	return parseStartup(body)
}

// parseStartup parses the body of a start-up packet (after its length word).
func parseStartup(body []byte) (startup, error) {
	if len(body) < 4 {
		return startup{}, protoErrorf("invalid length of startup packet")
	}
	code := binary.BigEndian.Uint32(body)
	rest := body[4:]
	switch code {
	case sslRequestCode, gssEncRequestCode:
		if len(rest) != 0 {
			return startup{}, protoErrorf("invalid length of startup packet")
		}
		if code == sslRequestCode {
			return startup{kind: kindSSL}, nil
		}
		return startup{kind: kindGSSEnc}, nil
	case cancelRequestCode:
		// Our keys are protocol 3.0's 4 bytes; a longer key (3.2) is not one we issued.
		if len(rest) != 8 {
			return startup{}, protoErrorf("invalid length of cancel request")
		}
		return startup{kind: kindCancel, cancel: CancelKey{
			PID:    binary.BigEndian.Uint32(rest),
			Secret: binary.BigEndian.Uint32(rest[4:]),
		}}, nil
	}
	if code>>16 != 3 {
		return startup{}, protoErrorf("unsupported frontend protocol %d.%d: server supports 3.0 to 3.0",
			code>>16, code&0xffff)
	}
	st := startup{kind: kindStartup, minor: uint16(code & 0xffff), params: map[string]string{}}
	// name\0value\0 ... \0: the list ends with an empty name.
	for {
		name, after, ok := cutNul(rest)
		if !ok {
			return startup{}, protoErrorf("invalid startup packet layout: expected terminator as last byte")
		}
		if name == "" {
			if len(after) != 0 {
				return startup{}, protoErrorf("invalid startup packet layout: expected terminator as last byte")
			}
			break
		}
		value, after, ok := cutNul(after)
		if !ok {
			return startup{}, protoErrorf("invalid startup packet layout: expected terminator as last byte")
		}
		rest = after
		if _, dup := st.params[name]; dup {
			return startup{}, protoErrorf("duplicate startup parameter %q", name)
		}
		if strings.HasPrefix(name, "_pq_.") {
			st.options = append(st.options, name)
			continue
		}
		st.params[name] = value
	}
	if st.params["user"] == "" {
		return startup{}, protoErrorf("no PostgreSQL user name specified in startup packet")
	}
	if _, ok := st.params["replication"]; ok {
		return startup{}, protoErrorf("replication connections are not supported")
	}
	if st.params["database"] == "" {
		st.params["database"] = st.params["user"]
	}
	return st, nil
}

func cutNul(b []byte) (string, []byte, bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", nil, false
	}
	return string(b[:i]), b[i+1:], true
}
