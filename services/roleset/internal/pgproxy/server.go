package pgproxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/millwright/millwright/pkg/defaults"
	"github.com/millwright/millwright/services/roleset/internal/secret"
)

// Binding is what a session is bound to, for CloseSessions to match; opaque to the proxy.
type Binding struct {
	TicketID, Workspace, JobID, DataTable, Login string
}

// Target is where an authenticated client's session goes.
type Target struct {
	// Dial starts a session upstream as the decided login; params are the client's run-time
	// parameters (application_name, options, ...). DialConfig makes one from a pgconn.Config.
	// An error that is (or wraps) a *pgconn.PgError reaches the client with its SQLSTATE and
	// message; any other is "could not connect" (08006).
	Dial func(ctx context.Context, params map[string]string) (*Backend, error)
	// Terminate ends the upstream backend pid (pg_terminate_backend as a role allowed to),
	// so that a closed session's backend is gone, not left to notice a closed socket. Nil:
	// the proxy sends the backend a cancel and closes its connection instead.
	Terminate func(ctx context.Context, upstreamPID uint32) error
	Bind      Binding
}

// Authorizer looks up the user name a client logs in with.
type Authorizer interface {
	// Verifier returns the SCRAM-SHA-256 verifier (PostgreSQL text form) of user and where its
	// session goes; ok=false for a user that must not log in (unknown, expired, revoked,
	// foreign): the client then gets the same refusal as for a wrong password, after the same
	// exchange.
	Verifier(ctx context.Context, user, database string) (verifier string, target Target, ok bool, err error)
}

// Config is what a Server needs. Authorizer is required.
type Config struct {
	Authorizer Authorizer
	// CancelKeys holds the cancel keys of live sessions; nil: a MemoryCancelKeys (cancels
	// reach only this replica's sessions).
	CancelKeys CancelKeys
	// TLS, if set, is offered to clients that ask (SSLRequest); nil answers 'N'.
	TLS *tls.Config
	// MaxSessions bounds the connections served at once, start-ups included (default 1000).
	MaxSessions int
	// StartupTimeout bounds the whole start-up: TLS, SCRAM, the upstream connect (default 10 s).
	StartupTimeout time.Duration
	Logger         *slog.Logger
	// OnSession, if set, is told of each session's start, granted or refused once the client
	// named its user, and of each granted session's end: the caller's audit trail. It is
	// called before the client learns a start was granted; an error then refuses the session
	// (57P03), for a caller that must not let in a session it could not record.
	OnSession func(SessionEvent) error
}

// SessionEvent is a session's start or end (Config.OnSession).
type SessionEvent struct {
	End            bool
	User, Database string
	// Bind is the session's binding: zero for a start refused before its user was found.
	Bind Binding
	// Code is the SQLSTATE a refused start was answered with ("" when granted).
	Code string
	// Why is an end's reason: EndClient, EndUpstream, EndClosed or EndShutdown.
	Why string
}

// Why a session ended (SessionEvent.Why).
const (
	EndClient   = "client closed"
	EndUpstream = "upstream closed"
	EndClosed   = "closed by CloseSessions" // a revocation
	EndShutdown = "proxy shut down"
)

// Server serves clients on the listeners given to Serve.
type Server struct {
	cfg     Config
	mockKey []byte
	base    context.Context // cancelled by Close: ends start-ups in progress
	stop    context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	// gen counts CloseSessions calls: a start-up that looked its user up before one of them
	// looks again (see bind).
	gen uint64
	wg  sync.WaitGroup
	// refusals counts the ErrorResponses sent at start-up, by SQLSTATE (Stats).
	refusals map[string]uint64
}

// Stats is what an operator watches (docs/operations.md, "The PostgreSQL proxy"): the client
// connections held (sessions and start-ups in progress), and the start-ups refused by SQLSTATE
// (28P01 a ticket refused, 53300 full, 08P01 a malformed start-up, 08006 upstream unreachable
// or too slow, 57P03 the ticket lookup failing, or the upstream's own code).
type Stats struct {
	Connections int
	Refusals    map[string]uint64
}

// Stats returns the current figures.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := make(map[string]uint64, len(s.refusals))
	for k, v := range s.refusals {
		r[k] = v
	}
	return Stats{Connections: len(s.conns), Refusals: r}
}

func (s *Server) refused(code string) {
	s.mu.Lock()
	if s.refusals == nil {
		s.refusals = map[string]uint64{}
	}
	s.refusals[code]++
	s.mu.Unlock()
}

func New(cfg Config) *Server {
	cfg.MaxSessions = defaults.Positive(cfg.MaxSessions, 1000)
	cfg.StartupTimeout = defaults.Positive(cfg.StartupTimeout, 10*time.Second)
	if cfg.CancelKeys == nil {
		cfg.CancelKeys = NewMemoryCancelKeys()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	mockKey := make([]byte, 32)
	_, _ = rand.Read(mockKey)
	base, stop := context.WithCancel(context.Background())
	return &Server{
		cfg: cfg, mockKey: mockKey, base: base, stop: stop,
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{},
	}
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("pgproxy: server closed")

// Serve accepts connections on ln until ln fails or Close is called (then ErrServerClosed).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	for {
		raw, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			delete(s.listeners, ln)
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			return err
		}
		c := &conn{raw: raw}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			raw.Close()
			continue
		}
		full := len(s.conns) >= s.cfg.MaxSessions
		if !full {
			s.conns[c] = struct{}{}
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(c, full)
	}
}

// Close stops the listeners, closes every connection and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	lns := slices.Collect(maps.Keys(s.listeners))
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	s.stop()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.closeAll(EndShutdown)
	}
	s.wg.Wait()
	return nil
}

// Bindings lists the bindings of the live sessions (for a caller that judges them again).
func (s *Server) Bindings() []Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Binding, 0, len(s.conns))
	for c := range s.conns {
		if b, ok := c.binding(); ok {
			out = append(out, b)
		}
	}
	return out
}

// CloseSessions ends every session whose binding matches, sessions still starting included,
// and returns how many it ended. The client's connection is closed at once; the upstream
// backend is terminated (Target.Terminate) before its connection is closed, so it is gone
// from pg_stat_activity when CloseSessions returns.
func (s *Server) CloseSessions(match func(Binding) bool) int {
	s.mu.Lock()
	s.gen++
	var hit []*conn
	for c := range s.conns {
		if b, ok := c.binding(); ok && match(b) {
			hit = append(hit, c)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	n := 0
	for _, c := range hit {
		up := c.close(EndClosed)
		if up == nil {
			continue
		}
		n++
		wg.Go(func() { s.endUpstream(up) })
	}
	wg.Wait()
	return n
}

// endUpstream ends a session's upstream backend, then closes its connection. Terminating
// while we still hold the connection means the pid cannot have been reused by then.
func (s *Server) endUpstream(up *upstream) {
	if up.conn == nil { // closed during start-up, before the upstream was connected
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if up.terminate != nil {
		err = up.terminate(ctx, up.cancel.PID)
	} else {
		err = sendCancel(ctx, up.cancel)
	}
	if err != nil {
		s.cfg.Logger.Warn("pgproxy: ending upstream backend", "pid", up.cancel.PID, "err", err)
	}
	up.conn.Close()
}

// conn is one client connection, from accept to close.
type conn struct {
	raw net.Conn // closing it ends the client side, TLS or not

	mu     sync.Mutex
	closed bool
	bound  bool
	bind   Binding
	up     upstream
	// cancelKey is set once the session's key is stored (only handle's goroutine uses it).
	cancelKey *CancelKey
	// why is the reason of the first close (SessionEvent.Why).
	why string
}

type upstream struct {
	conn      net.Conn
	cancel    CancelTarget
	terminate func(context.Context, uint32) error
}

func (c *conn) binding() (Binding, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bind, c.bound && !c.closed
}

// close closes the client connection for the reason why and returns the upstream for the
// caller to end, or nil if it was closed already.
func (c *conn) close(why string) *upstream {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed, c.why = true, why
	c.raw.Close()
	up := c.up
	return &up
}

// closeAll closes both sides for the reason why, unless someone else (CloseSessions) has
// taken them over.
func (c *conn) closeAll(why string) {
	if up := c.close(why); up != nil && up.conn != nil {
		up.conn.Close()
	}
}

// setUpstream records the upstream connection; false if the session was closed meanwhile.
func (c *conn) setUpstream(up upstream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.up = up
	return true
}

func (s *Server) handle(c *conn, full bool) {
	defer s.wg.Done()
	var started *SessionEvent // the granted start, whose end is told
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.closeAll(EndClient)
		if started != nil {
			c.mu.Lock()
			why := c.why
			c.mu.Unlock()
			end := *started
			end.End, end.Why = true, why
			_ = s.tell(end) // only a granted start can be refused for want of a record
		}
		if c.cancelKey != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.cfg.CancelKeys.Delete(ctx, *c.cancelKey); err != nil {
				s.cfg.Logger.Warn("pgproxy: deleting cancel key", "err", err)
			}
		}
	}()
	deadline := time.Now().Add(s.cfg.StartupTimeout)
	_ = c.raw.SetDeadline(deadline)
	ctx, cancel := context.WithDeadline(s.base, deadline)
	defer cancel()

	client, st, err := s.negotiate(ctx, c.raw)
	if err != nil {
		s.refuse(client, "08P01", err)
		return
	}
	switch {
	case st.kind == kindCancel:
		s.forwardCancel(ctx, st.cancel)
		return
	case full:
		_ = s.tell(SessionEvent{User: st.params["user"], Database: st.params["database"], Code: "53300"})
		_ = s.sendError(client, "53300", "sorry, too many clients already")
		return
	}
	up, ev, err := s.startSession(ctx, c, client, st)
	if err != nil {
		s.refuse(client, "08P01", err)
		return
	}
	if up == nil {
		return // refused with its own message
	}
	started = &ev
	_ = c.raw.SetDeadline(time.Time{})
	_ = up.SetDeadline(time.Time{})
	relay(client, up, c)
}

// tell passes e to Config.OnSession, if set.
func (s *Server) tell(e SessionEvent) error {
	if s.cfg.OnSession == nil {
		return nil
	}
	return s.cfg.OnSession(e)
}

// negotiate reads start-up packets until a StartupMessage or CancelRequest, answering
// SSLRequest (TLS if configured) and GSSENCRequest ('N') on the way.
func (s *Server) negotiate(ctx context.Context, raw net.Conn) (net.Conn, startup, error) {
	client := raw
	seen := map[startupKind]bool{}
	for {
		st, err := readStartup(client)
		if err != nil {
			return client, st, err
		}
		if st.kind != kindSSL && st.kind != kindGSSEnc {
			return client, st, nil
		}
		// Each request once, and none after TLS: a client asking forever would hold the
		// connection for nothing.
		if seen[st.kind] || client != raw {
			return client, st, protoErrorf("unsupported frontend protocol")
		}
		seen[st.kind] = true
		if st.kind == kindGSSEnc || s.cfg.TLS == nil {
			if _, err := raw.Write([]byte{'N'}); err != nil {
				return client, st, err
			}
			continue
		}
		if _, err := raw.Write([]byte{'S'}); err != nil {
			return client, st, err
		}
		tc := tls.Server(raw, s.cfg.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return raw, st, err // no TLS: the client cannot read an ErrorResponse in clear
		}
		client = tc
	}
}

// startSession authenticates the client, connects upstream and answers the start-up. It
// returns the upstream connection and the start told to OnSession; nil with a nil error when
// it refused the client itself (told to OnSession with its SQLSTATE).
func (s *Server) startSession(ctx context.Context, c *conn, client net.Conn, st startup) (net.Conn, SessionEvent, error) {
	user, database := st.params["user"], st.params["database"]
	ev := SessionEvent{User: user, Database: database}
	refuse := func(code, msg string) (net.Conn, SessionEvent, error) {
		ev.Code = code
		_ = s.tell(ev)
		return nil, ev, s.sendError(client, code, msg)
	}
	if st.minor != 0 || len(st.options) > 0 {
		if err := send(client, &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: st.options}); err != nil {
			return nil, ev, err
		}
	}
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	verifier, target, ok, err := s.cfg.Authorizer.Verifier(ctx, user, database)
	if err != nil {
		s.cfg.Logger.Error("pgproxy: looking up user", "user", user, "err", err)
		return refuse("57P03", "the proxy cannot check credentials now")
	}
	keys, perr := secret.ParseScramVerifier(verifier)
	if ok && perr != nil {
		s.cfg.Logger.Error("pgproxy: unusable verifier", "user", user, "err", perr)
	}
	known := ok && perr == nil
	if !known {
		keys = fakeScramKeys(s.mockKey, user)
	}
	if known {
		ev.Bind = target.Bind
	}
	passed, err := scramExchange(client, keys)
	if err != nil {
		return nil, ev, err
	}
	if !passed || !known {
		return refuse("28P01", `password authentication failed for user "`+user+`"`)
	}
	if target, ok, err = s.bind(ctx, c, gen, user, database, target); err != nil || !ok {
		if err != nil {
			s.cfg.Logger.Error("pgproxy: looking up user", "user", user, "err", err)
			return refuse("57P03", "the proxy cannot check credentials now")
		}
		return refuse("28P01", `password authentication failed for user "`+user+`"`)
	}
	ev.Bind = target.Bind

	params := maps.Clone(st.params)
	delete(params, "user")
	delete(params, "database")
	// The upstream gets the start-up's deadline less a reserve, so that a slow one still
	// leaves time to tell the client within the deadline.
	dialCtx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		dialCtx, cancel = context.WithDeadline(ctx, deadline.Add(-s.cfg.StartupTimeout/10))
		defer cancel()
	}
	be, err := target.Dial(dialCtx, params)
	if err != nil {
		s.cfg.Logger.Warn("pgproxy: connecting upstream", "user", user, "login", target.Bind.Login, "err", err)
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
			return refuse(pgErr.Code, pgErr.Message)
		}
		return refuse("08006", "could not connect to the database")
	}
	remote := be.Conn.RemoteAddr()
	up := upstream{
		conn:      be.Conn,
		cancel:    CancelTarget{Network: remote.Network(), Address: remote.String(), PID: be.PID, Secret: be.SecretKey},
		terminate: target.Terminate,
	}
	if !c.setUpstream(up) { // CloseSessions or Close got here first
		be.Conn.Close()
		return nil, ev, nil
	}
	if err := s.tell(ev); err != nil {
		s.cfg.Logger.Error("pgproxy: refusing a session that cannot be recorded", "user", user, "err", err)
		return refuse("57P03", "the proxy cannot record the session now")
	}
	key := newCancelKey()
	if err := s.cfg.CancelKeys.Put(ctx, key, up.cancel); err != nil {
		s.cfg.Logger.Warn("pgproxy: storing cancel key; this session cannot be cancelled", "err", err)
	} else {
		c.cancelKey = &key // handle deletes it when the session ends
	}
	reply := []pgproto3.Message{&pgproto3.AuthenticationOk{}}
	for _, name := range slices.Sorted(maps.Keys(be.ParameterStatuses)) {
		reply = append(reply, &pgproto3.ParameterStatus{Name: name, Value: be.ParameterStatuses[name]})
	}
	var secretKey [4]byte
	binary.BigEndian.PutUint32(secretKey[:], key.Secret)
	reply = append(reply,
		&pgproto3.BackendKeyData{ProcessID: key.PID, SecretKey: secretKey[:]},
		&pgproto3.ReadyForQuery{TxStatus: be.TxStatus})
	return be.Conn, ev, send(client, reply...)
}

// bind records the session's binding, from then on matched by CloseSessions. If a
// CloseSessions ran since the lookup (gen), it may have been about this user while we were
// not yet visible to it: look the user up again, so a revocation is never missed.
func (s *Server) bind(ctx context.Context, c *conn, gen uint64, user, database string, target Target) (Target, bool, error) {
	for range 3 {
		s.mu.Lock()
		c.mu.Lock()
		c.bind, c.bound = target.Bind, true
		c.mu.Unlock()
		current := s.gen == gen
		gen = s.gen
		s.mu.Unlock()
		if current {
			return target, true, nil
		}
		verifier, t, ok, err := s.cfg.Authorizer.Verifier(ctx, user, database)
		if err != nil || !ok || verifier == "" {
			return Target{}, false, err
		}
		target = t
	}
	return Target{}, false, errors.New("pgproxy: sessions are being closed too often to start one")
}

// refuse answers a failed start-up: protocol errors get an ErrorResponse; I/O errors (the
// client went away, the deadline passed) only the close.
func (s *Server) refuse(client net.Conn, code string, err error) {
	if perr, ok := errors.AsType[*protocolError](err); ok {
		_ = s.sendError(client, code, perr.msg)
	} else if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		_ = s.sendError(client, "08006", "start-up took too long")
	} else {
		return
	}
	lingerClose(client)
}

// lingerClose ends our side and reads (briefly) what the client still sends: closing a
// socket with unread input resets the connection, and the reset can destroy the
// ErrorResponse before the client has read it.
func lingerClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, maxStartupLen))
}

// sendError sends a FATAL ErrorResponse; the caller then closes the connection. It may be
// past the start-up deadline (a slow upstream): the client still gets a second to read why.
func (s *Server) sendError(client net.Conn, code, msg string) error {
	s.refused(code)
	_ = client.SetWriteDeadline(time.Now().Add(time.Second))
	return send(client, &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg})
}

// forwardCancel sends the upstream the cancel of the session key names, if it is one of ours.
func (s *Server) forwardCancel(ctx context.Context, key CancelKey) {
	t, ok, err := s.cfg.CancelKeys.Get(ctx, key)
	if err != nil {
		s.cfg.Logger.Warn("pgproxy: looking up cancel key", "err", err)
		return
	}
	if !ok {
		return
	}
	if err := sendCancel(ctx, t); err != nil {
		s.cfg.Logger.Warn("pgproxy: forwarding cancel", "pid", t.PID, "err", err)
	}
}

// relay copies bytes both ways until either side ends, then closes both (or leaves the
// upstream to CloseSessions, which terminates its backend before closing it). Nothing is
// parsed.
//
// A client that closes sends Terminate and its FIN together; the server, on Terminate,
// closes too, and on a loaded machine the upstream's end can be read before the client's.
// So an upstream end waits up to endGrace for the client's direction to end as well, and
// the session's end is the client's if it does (the upstream's error, if any, has already
// been relayed to the client by then; only the close itself waits).
func relay(client, up net.Conn, c *conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(up, client) // ends when the client closes
		c.closeAll(EndClient)
	}()
	copyHalf(client, up)
	select {
	case <-done:
		return
	case <-time.After(endGrace):
	}
	c.closeAll(EndUpstream)
	<-done
}

// endGrace is how long an upstream end waits for the client's own (see relay).
const endGrace = 250 * time.Millisecond

// relayBufferSize is the size of the buffers relay copies through when a side is TLS: a TLS
// record's largest plaintext, so that one read takes a record whole.
const relayBufferSize = 16 << 10

// relayBuffers are lent to a direction of a session only while it moves bytes: an idle
// session holds none (io.Copy's own 32 KB per direction, held while idle, was most of an idle
// TLS session's memory).
var relayBuffers = sync.Pool{New: func() any { return new([relayBufferSize]byte) }}

// copyHalf copies src to dst. Between two TCP connections io.Copy splices in the kernel and
// needs no buffer; from TLS, copyTLS borrows one per record; from plain TCP to TLS, the
// direction keeps a buffer of its own (the wrappers hide ReadFrom and WriteTo, through which
// io.Copy would allocate its 32 KB anyway).
func copyHalf(dst, src net.Conn) {
	_, dstTCP := dst.(*net.TCPConn)
	_, srcTCP := src.(*net.TCPConn)
	if tc, ok := src.(*tls.Conn); ok {
		copyTLS(dst, tc)
		return
	}
	if dstTCP && srcTCP {
		_, _ = io.Copy(dst, src)
		return
	}
	_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, relayBufferSize/2))
}

// copyTLS copies src to dst holding no buffer while src idles. It waits for a record with a
// one-byte read (tls.Conn decrypts the whole record into a buffer of its own), then takes the
// rest of what it holds with a read that must not wait, under a deadline already past: a
// tls.Conn returns what it has decrypted or can decrypt from bytes already received without
// touching the network, and a timeout leaves it usable (only write timeouts break it). The
// lot goes out in one write, so a message is not split into more writes than it came in.
func copyTLS(dst io.Writer, src *tls.Conn) {
	var first [1]byte
	for {
		if _, err := io.ReadFull(src, first[:]); err != nil {
			return
		}
		buf, _ := relayBuffers.Get().(*[relayBufferSize]byte) // the pool holds nothing else
		buf[0] = first[0]
		n, err := readHeld(src, buf[1:])
		_, werr := dst.Write(buf[:1+n])
		relayBuffers.Put(buf)
		if err != nil || werr != nil {
			return
		}
	}
}

// readHeld reads into p what src holds already, without waiting for the network.
func readHeld(src *tls.Conn, p []byte) (int, error) {
	if err := src.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return 0, err
	}
	n, err := src.Read(p)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	return n, src.SetReadDeadline(time.Time{})
}
