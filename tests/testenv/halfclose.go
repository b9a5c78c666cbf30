package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// HalfCloseProxy forwards TCP connections to a server until
// DropClientSide, which closes the clients' side of every connection (and
// refuses new ones) while keeping the server's side open and silent: the
// server sees a healthy idle session, as it does when the client's host
// vanished or a middlebox dropped the client. (Proxy's Cut closes both
// sides, which the server notices at once.) It is closed when the test
// ends.
type HalfCloseProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	clients []net.Conn
	servers []net.Conn
	dropped bool
}

// NewHalfCloseProxy starts a proxy to target (host:port) on a loopback port.
func NewHalfCloseProxy(t testing.TB, target string) *HalfCloseProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("half-close proxy: %v", err)
	}
	p := &HalfCloseProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *HalfCloseProxy) Addr() string { return p.ln.Addr().String() }

func (p *HalfCloseProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.dropped {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		p.clients, p.servers = append(p.clients, c), append(p.servers, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c) }() // ends when c closes; s stays open
		go func() { _, _ = io.Copy(c, s) }()
	}
}

// DropClientSide closes every client connection and the listener; the
// server connections stay open, and nothing more is sent on them.
func (p *HalfCloseProxy) DropClientSide() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped = true
	_ = p.ln.Close()
	for _, c := range p.clients {
		_ = c.Close()
	}
}

func (p *HalfCloseProxy) close() {
	p.DropClientSide()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.servers {
		_ = s.Close()
	}
}
