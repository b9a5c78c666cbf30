package testenv

import (
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox/txboxrabbitmq"
)

// EnvRabbitMQ points tests at RabbitMQ; default amqp://guest:guest@127.0.0.1:5672/.
const EnvRabbitMQ = "TXBOX_TEST_RABBITMQ"

// RabbitMQURL is the URL of the shared RabbitMQ.
func RabbitMQURL() string {
	if u := os.Getenv(EnvRabbitMQ); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// RabbitMQ returns the URL of the shared RabbitMQ after checking that its
// port accepts connections (skip, or fail under CI=true, if not). Tests
// isolate themselves by queue names (Name).
func RabbitMQ(t testing.TB) string {
	t.Helper()
	u := RabbitMQURL()
	addr := hostPort(u)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		Unavailable(t, "RabbitMQ", err)
	}
	_ = c.Close()
	return u
}

// hostPort extracts host:port from an amqp URL.
func hostPort(u string) string {
	s := u
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	if i := strings.Index(s, "@"); i >= 0 {
		s = s[i+1:]
	}
	if i := strings.Index(s, "/"); i >= 0 {
		s = s[:i]
	}
	if strings.Index(s, ":") < 0 {
		s += ":5672"
	}
	return s
}

// Proxy forwards TCP connections from a local port to a target address, so
// that a test can cut a client off a shared broker (Cut) without touching
// the broker, and let it reconnect (Resume).
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
}

// NewProxy listens on 127.0.0.1:0 and forwards to target ("host:port").
// It is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the host:port of an amqp-style URL, for NewProxy.
func Target(url string) string { return hostPort(url) }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close(); _ = c.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = up.Close(); _ = c.Close() }()
	}
}

// Cut closes every forwarded connection and refuses new ones until Resume.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Resume accepts connections again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// RabbitMQConn returns a txboxrabbitmq.Conn to url (which it dials on first
// use), closed when the test ends.
func RabbitMQConn(t testing.TB, url string) *txboxrabbitmq.Conn {
	t.Helper()
	conn, err := txboxrabbitmq.NewConn(url, txboxrabbitmq.ConnConfig{})
	Must(t, err, "txboxrabbitmq.NewConn")
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
