package pgproxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/millwright/millwright/services/roleset/internal/secret"
)

// Backend is an upstream connection past its start-up: what the proxy needs to answer the
// client's start-up itself and then relay.
type Backend struct {
	// Conn is TLS or plain, as the upstream's configuration asked. Its deadline is still the
	// start-up's; the proxy clears it before relaying.
	Conn              net.Conn
	PID               uint32
	SecretKey         []byte
	ParameterStatuses map[string]string
	TxStatus          byte
}

// DialConfig returns a Target.Dial that starts a session upstream as cfg says (cfg as
// pgconn.ParseConfig makes it): Host and Port (a unix socket for a host starting with '/'),
// TLSConfig and Fallbacks (sslmode disable, allow, prefer, require, verify-*, several hosts,
// sslnegotiation=direct), User, Password, Database, RuntimeParams, ConnectTimeout and DialFunc.
// The client's run-time parameters are added to cfg's; cfg's own win, so the caller can pin
// some. Hooks that run on a pgconn.PgConn (AfterConnect, ValidateConnect, so
// target_session_attrs) do not apply: there is none; channel_binding=require and require_auth
// are refused. As with pgconn, sslmode=prefer against a server without TLS dials again in
// clear (the fallback).
//
// The start-up is the proxy's own rather than pgconn's so that the SCRAM client's PBKDF2 of
// the password, a millisecond of CPU at 4,096 iterations, is done once per (password, salt,
// iteration count) and not at every connect (upstreamKeys); the server's signature is still
// checked at every connect.
func DialConfig(cfg *pgconn.Config) func(context.Context, map[string]string) (*Backend, error) {
	return func(ctx context.Context, params map[string]string) (*Backend, error) {
		merged := maps.Clone(params)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, cfg.RuntimeParams)
		return dialUpstream(ctx, cfg, merged, upstreamKeys)
	}
}

// upstreamKeys is the process's cache of SCRAM client keys. It is a memo of a pure function
// of its key, so all servers and targets of the process can share it. Its bound is the
// number of upstream logins whose keys stay warm: one entry per (login, password) in use,
// about 200 bytes each; a replica proxying to more logins than that pays the PBKDF2 on some
// connects again, which is what every connect cost before the cache.
var upstreamKeys = newKeyCache(1024)

// authStopsFallback are the upstream refusals after which no other host or TLS mode is tried
// (pgconn's and libpq's rule): a wrong password, an unknown database, no CONNECT privilege.
var authStopsFallback = []string{"28P01", "3D000", "42501"}

// dialUpstream tries cfg's host, then its fallbacks, until one starts a session.
func dialUpstream(ctx context.Context, cfg *pgconn.Config, params map[string]string, keys *keyCache) (*Backend, error) {
	// Settings that restrict the authentication: silently ignoring them would be a downgrade.
	if cfg.ChannelBinding == "require" || cfg.RequireAuth != "" {
		return nil, errors.New("pgproxy: channel_binding=require and require_auth are not supported upstream")
	}
	attempts := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	var errs []error
	for _, a := range attempts {
		b, err := dialOne(ctx, cfg, a, params, keys)
		if err == nil {
			return b, nil
		}
		errs = append(errs, err)
		pgErr, isPg := errors.AsType[*pgconn.PgError](err)
		if ctx.Err() != nil || errors.Is(err, errUpstreamAuth) || isPg && slices.Contains(authStopsFallback, pgErr.Code) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// errUpstreamAuth marks a failure of the authentication itself (the server's proof, an
// unsupported method): trying another TLS mode or host would not mend it.
var errUpstreamAuth = errors.New("upstream authentication")

func dialOne(ctx context.Context, cfg *pgconn.Config, a *pgconn.FallbackConfig, params map[string]string, keys *keyCache) (*Backend, error) {
	if cfg.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
	}
	network, address := pgconn.NetworkAddress(a.Host, a.Port)
	dial := cfg.DialFunc
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", address, err)
	}
	b, err := startUpstream(ctx, raw, cfg, a.TLSConfig, params, keys)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("upstream %s: %w", address, err)
	}
	return b, nil
}

// maxUpstreamMsgLen bounds a message of the upstream's start-up: they are a few hundred bytes
// (an ErrorResponse with its detail and hint, a ParameterStatus).
const maxUpstreamMsgLen = 64 << 10

// startUpstream runs the start-up on raw: TLS if tlsCfg is set, the StartupMessage,
// authentication, then the ParameterStatus and BackendKeyData messages up to ReadyForQuery.
// All of it within ctx: its deadline is the connection's, and its end breaks off the reads.
func startUpstream(ctx context.Context, raw net.Conn, cfg *pgconn.Config, tlsCfg *tls.Config,
	params map[string]string, keys *keyCache,
) (*Backend, error) {
	if deadline, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn := raw
	if tlsCfg != nil {
		if cfg.SSLNegotiation != "direct" {
			if err := send(raw, &pgproto3.SSLRequest{}); err != nil {
				return nil, err
			}
			var answer [1]byte
			if _, err := io.ReadFull(raw, answer[:]); err != nil {
				return nil, err
			}
			if answer[0] != 'S' {
				return nil, errors.New("server refused TLS connection")
			}
		}
		tc := tls.Client(raw, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		conn = tc
	}
	startup := &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: maps.Clone(params)}
	startup.Parameters["user"] = cfg.User
	if cfg.Database != "" {
		startup.Parameters["database"] = cfg.Database
	}
	if err := send(conn, startup); err != nil {
		return nil, err
	}
	// Buffered reads: a start-up is a dozen small messages. The server sends nothing after
	// ReadyForQuery until asked, so nothing is left in the buffer when the relay takes over
	// the connection (checked: bytes left there would be lost).
	r := bufio.NewReader(conn)
	b := &Backend{Conn: conn, ParameterStatuses: map[string]string{}}
	authenticated := false
	for {
		typ, body, err := readTyped(r, maxUpstreamMsgLen)
		if err != nil {
			return nil, err
		}
		switch typ {
		case 'R':
			if len(body) < 4 {
				return nil, errors.New("malformed authentication request")
			}
			switch method := binary.BigEndian.Uint32(body); method {
			case authOk:
				authenticated = true
			case authSASL:
				var m pgproto3.AuthenticationSASL
				if err := m.Decode(body); err != nil {
					return nil, err
				}
				if !slices.Contains(m.AuthMechanisms, scramMechanism) {
					return nil, fmt.Errorf("%w: server offers SASL mechanisms %q, not %s", errUpstreamAuth, m.AuthMechanisms, scramMechanism)
				}
				if err := scramClient(conn, r, cfg.Password, keys); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("%w: server asks for %s; the proxy logs in with SCRAM-SHA-256 only "+
					"(roleset creates its upstream logins with SCRAM verifiers: is password_encryption md5 there?)",
					errUpstreamAuth, authMethodName(method))
			}
		case 'S':
			var m pgproto3.ParameterStatus
			if err := m.Decode(body); err != nil {
				return nil, err
			}
			b.ParameterStatuses[m.Name] = m.Value
		case 'K':
			var m pgproto3.BackendKeyData
			if err := m.Decode(body); err != nil {
				return nil, err
			}
			b.PID, b.SecretKey = m.ProcessID, m.SecretKey
		case 'Z':
			var m pgproto3.ReadyForQuery
			if err := m.Decode(body); err != nil {
				return nil, err
			}
			switch {
			case !authenticated:
				return nil, errors.New("ReadyForQuery before AuthenticationOk")
			case r.Buffered() > 0:
				return nil, errors.New("server sent more after ReadyForQuery")
			case !stop(): // ctx ended meanwhile: the connection's deadline is past
				return nil, ctx.Err()
			}
			b.TxStatus = m.TxStatus
			return b, nil
		case 'E':
			return nil, errorResponse(body)
		case 'N', 'v': // a notice; NegotiateProtocolVersion (we ask for 3.0 and no options)
		default:
			return nil, fmt.Errorf("unexpected message type %q during start-up", typ)
		}
	}
}

// Authentication request codes (PostgreSQL protocol, "Message Formats": AuthenticationXxx).
const (
	authOk           = 0
	authCleartext    = 3
	authMD5          = 5
	authSASL         = 10
	authSASLContinue = 11
	authSASLFinal    = 12
)

func authMethodName(m uint32) string {
	switch m {
	case authCleartext:
		return "a cleartext password"
	case authMD5:
		return "an MD5 password"
	}
	return "authentication method " + strconv.Itoa(int(m))
}

// errorResponse is the upstream's ErrorResponse as the *pgconn.PgError startSession forwards
// (its SQLSTATE and message) to the client.
func errorResponse(body []byte) error {
	var m pgproto3.ErrorResponse
	if err := m.Decode(body); err != nil {
		return err
	}
	return pgconn.ErrorResponseToPgError(&m)
}

// scramClient runs the client side of SCRAM-SHA-256 (no channel binding) after the server's
// AuthenticationSASL, up to its final message, whose ServerSignature must prove that the
// server holds the verifier of password: a server that cannot is refused.
func scramClient(w net.Conn, r *bufio.Reader, password string, keys *keyCache) error {
	nonce := make([]byte, 18)
	_, _ = rand.Read(nonce)
	clientNonce := base64.StdEncoding.EncodeToString(nonce)
	// The user name is the start-up's; PostgreSQL ignores the one here.
	clientFirstBare := "n=,r=" + clientNonce
	if err := send(w, &pgproto3.SASLInitialResponse{AuthMechanism: scramMechanism, Data: []byte("n,," + clientFirstBare)}); err != nil {
		return err
	}
	serverFirst, err := readAuth(r, authSASLContinue)
	if err != nil {
		return err
	}
	fullNonce, salt, iterations, err := parseServerFirst(string(serverFirst), clientNonce)
	if err != nil {
		return err
	}
	k, err := keys.get(password, salt, iterations)
	if err != nil {
		return err
	}
	withoutProof := "c=biws,r=" + fullNonce // biws: base64 of the GS2 header "n,,"
	authMessage := clientFirstBare + "," + string(serverFirst) + "," + withoutProof
	proof := xorClientSignature(k.storedKey, authMessage, k.clientKey)
	if err := send(w, &pgproto3.SASLResponse{Data: []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof))}); err != nil {
		return err
	}
	final, err := readAuth(r, authSASLFinal)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(final, []byte(serverFinal(k.serverKey, authMessage))) != 1 {
		return fmt.Errorf("%w: the server's SCRAM signature is wrong: it does not hold the login's verifier", errUpstreamAuth)
	}
	return nil
}

// readAuth reads the server's next message, which must be the authentication request code
// (SASLContinue or SASLFinal), and returns its data; an ErrorResponse (a wrong password)
// comes back as its *pgconn.PgError.
func readAuth(r *bufio.Reader, code uint32) ([]byte, error) {
	typ, body, err := readTyped(r, maxUpstreamMsgLen)
	if err != nil {
		return nil, err
	}
	if typ == 'E' {
		return nil, errorResponse(body)
	}
	if typ != 'R' || len(body) < 4 || binary.BigEndian.Uint32(body) != code {
		return nil, fmt.Errorf("unexpected message type %q during SCRAM authentication", typ)
	}
	return body[4:], nil
}

// parseServerFirst reads the server's "r=<nonce>,s=<salt>,i=<iterations>[,extensions]": the
// nonce must extend the client's.
func parseServerFirst(msg, clientNonce string) (nonce string, salt []byte, iterations int, err error) {
	bad := fmt.Errorf("malformed SCRAM server-first-message")
	parts := strings.SplitN(msg, ",", 4)
	if len(parts) < 3 {
		return "", nil, 0, bad
	}
	nonce, ok1 := strings.CutPrefix(parts[0], "r=")
	s, ok2 := strings.CutPrefix(parts[1], "s=")
	i, ok3 := strings.CutPrefix(parts[2], "i=")
	if !ok1 || !ok2 || !ok3 || !strings.HasPrefix(nonce, clientNonce) || len(nonce) == len(clientNonce) || !printable(nonce) {
		return "", nil, 0, bad
	}
	if salt, err = base64.StdEncoding.Strict().DecodeString(s); err != nil || len(salt) == 0 {
		return "", nil, 0, bad
	}
	if iterations, err = strconv.Atoi(i); err != nil || iterations < 1 {
		return "", nil, 0, bad
	}
	return nonce, salt, iterations, nil
}

// clientKeys is what a SCRAM client derives from the password (secret.ScramClientKeys), with
// the StoredKey hashed from it once.
type clientKeys struct{ clientKey, storedKey, serverKey []byte }

// keyCache memoizes secret.ScramClientKeys. An entry's key is a SHA-256 of the iteration
// count, the salt and the password together: never the password in clear, and never a login
// name, so a new password or a new salt (ALTER ROLE ... PASSWORD makes both) misses. At most
// max entries; when full, an arbitrary one is evicted (Go's map order is randomized): the
// entries are all alike, a recency list would buy nothing.
type keyCache struct {
	mu  sync.Mutex
	max int
	m   map[[sha256.Size]byte]clientKeys
}

func newKeyCache(max int) *keyCache {
	return &keyCache{max: max, m: map[[sha256.Size]byte]clientKeys{}}
}

func (c *keyCache) get(password string, salt []byte, iterations int) (clientKeys, error) {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(iterations)))
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(salt))))
	h.Write(salt)
	h.Write([]byte(password))
	var key [sha256.Size]byte
	h.Sum(key[:0])

	c.mu.Lock()
	k, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return k, nil
	}
	// Outside the lock: two connects missing at once both derive, rather than one waiting.
	clientKey, serverKey, err := secret.ScramClientKeys(password, salt, iterations)
	if err != nil {
		return clientKeys{}, err
	}
	stored := sha256.Sum256(clientKey)
	k = clientKeys{clientKey: clientKey, storedKey: stored[:], serverKey: serverKey}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[key] = k
	return k, nil
}

func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
