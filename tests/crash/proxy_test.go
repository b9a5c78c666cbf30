package crash_test

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// faultProxy forwards TCP connections to PostgreSQL and breaks them three
// ways: Cut closes both sides of every connection (the server sees it at
// once), Freeze stops forwarding bytes while keeping every connection open
// (a stalled network), DropClient closes only the clients' side, keeping the
// server's side open and silent (a vanished host: the server sees a healthy
// idle session) until orphanTTL later, when the server's TCP keepalive would
// have noticed. While down (Cut, DropClient) new connections are refused
// until Resume; while frozen they hang with the others.
type faultProxy struct {
	ln        net.Listener
	target    string
	orphanTTL time.Duration

	mu     sync.Mutex
	cond   *sync.Cond
	pairs  []*pair
	down   bool
	frozen bool
	closed bool
}

type pair struct {
	client, server net.Conn
	orphaned       atomic.Bool // DropClient: the server side outlives the client's
}

// close closes both sides, unless the pair was orphaned by DropClient.
func (pr *pair) close() {
	if pr.orphaned.Load() {
		return
	}
	_ = pr.client.Close()
	_ = pr.server.Close()
}

func newFaultProxy(target string, orphanTTL time.Duration) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{ln: ln, target: target, orphanTTL: orphanTTL}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	return p, nil
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down || p.closed
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		p.pairs = append(p.pairs, pr)
		p.mu.Unlock()
		go p.pipe(pr, s, c)
		go p.pipe(pr, c, s)
	}
}

// pipe copies src to dst, waiting while the proxy is frozen; when either
// fails it closes the pair.
func (p *faultProxy) pipe(pr *pair, dst, src net.Conn) {
	defer pr.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut closes both sides of every connection and refuses new ones.
func (p *faultProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, pr := range p.pairs {
		pr.close()
	}
	p.pairs = nil
}

// DropClient closes the clients' side of every connection and refuses new
// ones; the server sides stay open, silent, for orphanTTL.
func (p *faultProxy) DropClient() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, pr := range p.pairs {
		pr.orphaned.Store(true)
		_ = pr.client.Close()
		srv := pr.server
		time.AfterFunc(p.orphanTTL, func() { _ = srv.Close() })
	}
	p.pairs = nil
}

// Freeze stops forwarding bytes; connections stay open.
func (p *faultProxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Resume lifts Cut, DropClient and Freeze.
func (p *faultProxy) Resume() {
	p.mu.Lock()
	p.down, p.frozen = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close closes the listener and every connection.
func (p *faultProxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
}
