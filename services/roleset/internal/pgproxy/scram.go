package pgproxy

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"io"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/millwright/millwright/services/roleset/internal/secret"
)

const (
	scramMechanism = "SCRAM-SHA-256"
	// maxSASLLen bounds a client's SASL message: both SCRAM messages a client sends are a
	// few hundred bytes.
	maxSASLLen = 2048
)

// scramExchange runs the server side of SCRAM-SHA-256 (RFC 5802/7677, no channel binding) on
// rw against keys. It reports whether the client's proof matches; it then has sent the
// server's final message. A client that breaks the protocol gets a *protocolError. The
// exchange is the same for a fake verifier, so a refusal does not say which it was.
func scramExchange(rw io.ReadWriter, keys secret.ScramKeys) (bool, error) {
	if err := send(rw, &pgproto3.AuthenticationSASL{AuthMechanisms: []string{scramMechanism}}); err != nil {
		return false, err
	}
	body, err := readMessage(rw, 'p', maxSASLLen)
	if err != nil {
		return false, err
	}
	var initial pgproto3.SASLInitialResponse
	if err := initial.Decode(body); err != nil {
		return false, protoErrorf("malformed SASL message")
	}
	if initial.AuthMechanism != scramMechanism {
		return false, protoErrorf("client selected an invalid SASL authentication mechanism")
	}
	gs2, clientFirstBare, clientNonce, err := parseClientFirst(string(initial.Data))
	if err != nil {
		return false, err
	}
	nonce := make([]byte, 18)
	_, _ = rand.Read(nonce)
	fullNonce := clientNonce + base64.StdEncoding.EncodeToString(nonce)
	serverFirst := "r=" + fullNonce + ",s=" + base64.StdEncoding.EncodeToString(keys.Salt) +
		",i=" + strconv.Itoa(keys.Iterations)
	if err := send(rw, &pgproto3.AuthenticationSASLContinue{Data: []byte(serverFirst)}); err != nil {
		return false, err
	}
	if body, err = readMessage(rw, 'p', maxSASLLen); err != nil {
		return false, err
	}
	withoutProof, proof, err := parseClientFinal(string(body), gs2, fullNonce)
	if err != nil {
		return false, err
	}
	authMessage := clientFirstBare + "," + serverFirst + "," + withoutProof
	// The client's proof gives back its ClientKey, which must hash to StoredKey.
	stored := sha256.Sum256(xorClientSignature(keys.StoredKey, authMessage, proof))
	if subtle.ConstantTimeCompare(stored[:], keys.StoredKey) != 1 {
		return false, nil
	}
	return true, send(rw, &pgproto3.AuthenticationSASLFinal{Data: []byte(serverFinal(keys.ServerKey, authMessage))})
}

// xorClientSignature returns b XOR ClientSignature, where ClientSignature is
// HMAC(StoredKey, AuthMessage): a client makes its proof from its ClientKey so, and a server
// gets the ClientKey back from the proof.
func xorClientSignature(storedKey []byte, authMessage string, b []byte) []byte {
	out := secret.HMACSHA256(storedKey, authMessage)
	for i := range out {
		out[i] ^= b[i]
	}
	return out
}

// serverFinal is the server's last SCRAM message, "v=<ServerSignature>": the proof that the
// server holds the verifier. A server sends it; a client computes it to check what it got.
func serverFinal(serverKey []byte, authMessage string) string {
	return "v=" + base64.StdEncoding.EncodeToString(secret.HMACSHA256(serverKey, authMessage))
}

// parseClientFirst reads "gs2-header client-first-bare", where the GS2 header is "n,," or
// "y,," (a client that could bind a channel but was not offered it) and the bare part is
// "n=<ignored>,r=<nonce>[,extensions]". Like PostgreSQL it ignores the user name in it: the
// user is the start-up packet's.
func parseClientFirst(msg string) (gs2, bare, nonce string, err error) {
	bad := protoErrorf("malformed SCRAM message")
	switch {
	case strings.HasPrefix(msg, "n,,"), strings.HasPrefix(msg, "y,,"):
		gs2, bare = msg[:3], msg[3:]
	case strings.HasPrefix(msg, "p="):
		return "", "", "", protoErrorf("channel binding is not supported")
	default:
		return "", "", "", bad
	}
	user, rest, ok := strings.Cut(bare, ",")
	if !ok || !strings.HasPrefix(user, "n=") || !strings.HasPrefix(rest, "r=") {
		return "", "", "", bad
	}
	nonce, _, _ = strings.Cut(rest[2:], ",")
	if nonce == "" || !printable(nonce) {
		return "", "", "", bad
	}
	return gs2, bare, nonce, nil
}

// parseClientFinal reads "c=<base64 gs2 header>,r=<nonce>[,extensions],p=<proof>" and returns
// the message without ",p=..." (part of the AuthMessage) and the 32-byte proof.
func parseClientFinal(msg, gs2, fullNonce string) (string, []byte, error) {
	bad := protoErrorf("malformed SCRAM message")
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return "", nil, bad
	}
	withoutProof := msg[:i]
	proof, err := base64.StdEncoding.DecodeString(msg[i+3:])
	if err != nil || len(proof) != sha256.Size {
		return "", nil, bad
	}
	cb, rest, ok := strings.Cut(withoutProof, ",")
	if !ok || cb != "c="+base64.StdEncoding.EncodeToString([]byte(gs2)) {
		return "", nil, bad
	}
	r, _, _ := strings.Cut(rest, ",")
	if r != "r="+fullNonce {
		return "", nil, bad
	}
	return withoutProof, proof, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}

// fakeScramKeys is what an unknown user is checked against: no proof matches it. The salt is
// derived from the user name under a key of this server, so asking twice for one unknown name
// gets the same salt, as for a real one (PostgreSQL's mock authentication does the same).
func fakeScramKeys(mockKey []byte, user string) secret.ScramKeys {
	random := make([]byte, 2*sha256.Size)
	_, _ = rand.Read(random)
	return secret.ScramKeys{
		Iterations: secret.DefaultIterations,
		Salt:       secret.HMACSHA256(mockKey, user)[:16],
		StoredKey:  random[:sha256.Size],
		ServerKey:  random[sha256.Size:],
	}
}

// readMessage reads one client message with no read-ahead and returns its body. It must be of
// type want and its body at most max bytes.
func readMessage(r io.Reader, want byte, max int) ([]byte, error) {
	typ, body, err := readTyped(r, max)
	if err != nil {
		return nil, err
	}
	if typ != want {
		return nil, protoErrorf("expected SASL response, got message type %d", typ)
	}
	return body, nil
}

// readTyped reads one typed message (either direction) and returns its type and body, of at
// most max bytes. It reads no further than the message.
func readTyped(r io.Reader, max int) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n-4 > uint32(max) {
		return 0, nil, protoErrorf("invalid message length")
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return hdr[0], body, nil
}

// send writes messages (either direction) in one write.
func send(w io.Writer, msgs ...pgproto3.Message) error {
	var buf []byte
	for _, m := range msgs {
		var err error
		if buf, err = m.Encode(buf); err != nil {
			return err
		}
	}
	_, err := w.Write(buf)
	return err
}
