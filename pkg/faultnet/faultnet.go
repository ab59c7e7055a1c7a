package faultnet

import (
	"net"
	"sync"
	"time"
)

// Direction is the way bytes flow through the proxy.
type Direction int

const (
	// Up is from the client that connected to the proxy towards the target.
	Up Direction = iota
	// Down is from the target back to the client.
	Down
)

// Proxy forwards connections to a target and injects faults. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu          sync.Mutex
	latency     [2]time.Duration
	stalled     bool
	partitioned bool
	refusing    bool
	closed      bool
	// changed is closed (and replaced) at every state change: whoever waits for a heal waits
	// on it and then looks again.
	changed chan struct{}
	links   map[*link]struct{}
	wg      sync.WaitGroup
}

// link is one client connection and, once dialled, its connection to the target.
type link struct {
	client net.Conn
	done   chan struct{} // closed by close

	mu       sync.Mutex
	upstream net.Conn
	closed   bool
}

// Listen starts a proxy on a loopback port of its own that forwards to target (host:port).
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where the proxy listens (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// HostPort is Addr split, for configurations that take them apart.
func (p *Proxy) HostPort() (string, int) {
	a, _ := p.ln.Addr().(*net.TCPAddr) // Listen makes a TCP listener
	return a.IP.String(), a.Port
}

// SetLatency delays every chunk of bytes read in direction d by delay before it is forwarded
// (0: none). Order is kept; throughput drops, which tests do not measure.
func (p *Proxy) SetLatency(d Direction, delay time.Duration) {
	p.update(func() { p.latency[d] = delay })
}

// Stall stops forwarding bytes on every connection, open or new, keeping them all open: a
// peer sees silence, as with lost packets. Heal forwards what was held back.
func (p *Proxy) Stall() { p.update(func() { p.stalled = true }) }

// Partition stalls the open connections and black-holes new ones (accepted, but not
// connected to the target until Heal): no byte crosses either way.
func (p *Proxy) Partition() { p.update(func() { p.partitioned = true }) }

// Reset closes every open connection with an RST on both sides (SO_LINGER 0). Connections
// made afterwards are forwarded as usual.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// Refuse resets every open connection (Reset) and every new one as soon as it is accepted,
// until Heal: a path where something answers every packet with an RST.
func (p *Proxy) Refuse() {
	p.update(func() { p.refusing = true })
	p.Reset()
}

// Heal removes latency, stall, partition and refusal. Held bytes and black-holed connections go on.
func (p *Proxy) Heal() {
	p.update(func() { p.latency = [2]time.Duration{}; p.stalled, p.partitioned, p.refusing = false, false, false })
}

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.update(func() { p.closed = true })
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) update(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		if p.refusing {
			p.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a close
			}
			_ = c.Close()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// wait blocks while bytes may not flow (blackhole: also while partitioned) and returns the
// latency of direction d; false when the link or the proxy closed meanwhile.
func (p *Proxy) wait(l *link, d Direction, blackhole bool) (time.Duration, bool) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, false
		}
		if !p.partitioned && (blackhole || !p.stalled) {
			delay := p.latency[d]
			p.mu.Unlock()
			return delay, true
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-l.done:
			return 0, false
		}
	}
}

func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		l.close(false)
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if _, ok := p.wait(l, Up, true); !ok {
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	if !l.setUpstream(up) {
		return // reset or closed while dialling
	}
	var pumps sync.WaitGroup
	pumps.Go(func() { p.pump(l, up, l.client, Up) })
	pumps.Go(func() { p.pump(l, l.client, up, Down) })
	pumps.Wait()
}

// pump copies src to dst, chunk by chunk, each after the gate opens; the first error of
// either direction ends the link.
func (p *Proxy) pump(l *link, dst, src net.Conn, d Direction) {
	defer l.close(false)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			delay, ok := p.wait(l, d, false)
			if !ok {
				return
			}
			if delay > 0 {
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-l.done:
					t.Stop()
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a reset: either ends the link, as the peer ended its side
		}
	}
}

func (l *link) setUpstream(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return false
	}
	l.upstream = c
	return true
}

// close ends both connections, with RST when rst.
func (l *link) close(rst bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	for _, c := range []net.Conn{l.client, l.upstream} {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && rst {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	close(l.done)
}
