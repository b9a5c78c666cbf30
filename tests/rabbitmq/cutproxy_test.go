package rabbitmq_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// cutProxy forwards AMQP connections to a broker and, once armed, closes
// them all just before the n-th method frame that one side sends after
// arming would be forwarded: a client killed at that point of a protocol
// exchange (before it sent a frame, or before it heard the broker's
// reply), at the same point on every run.
type cutProxy struct {
	ln     net.Listener
	target string

	mu         sync.Mutex
	conns      []net.Conn
	armed      bool
	fromClient bool // which side's frames count
	left       int  // method frames still to forward before the cut
	cut        bool // the armed cut happened
	frames     []string
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// arm makes the proxy cut every connection before the n-th method frame
// the client (fromClient) or the broker sends from now on (n = 1: the
// next one).
func (p *cutProxy) arm(fromClient bool, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.fromClient, p.left, p.cut, p.frames = true, fromClient, n-1, false, nil
}

// disarm stops cutting and reports whether the armed cut happened, and the
// methods forwarded while armed from the side that counts.
func (p *cutProxy) disarm() (bool, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	return p.cut, p.frames
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { p.forward(up, c, false); _ = up.Close(); _ = c.Close() }()
		go func() { p.forward(c, up, true); _ = up.Close(); _ = c.Close() }()
	}
}

// forward copies frames from src to dst one by one, stopping at the armed
// cut.
func (p *cutProxy) forward(src, dst net.Conn, fromClient bool) {
	if fromClient {
		hdr := make([]byte, 8) // "AMQP" 0 0 9 1
		if _, err := io.ReadFull(src, hdr); err != nil {
			return
		}
		if _, err := dst.Write(hdr); err != nil {
			return
		}
	}
	for {
		head := make([]byte, 7) // type, channel, size
		if _, err := io.ReadFull(src, head); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(head[3:])
		rest := make([]byte, int(size)+1) // payload, frame end
		if _, err := io.ReadFull(src, rest); err != nil {
			return
		}
		if head[0] == 1 && size >= 4 { // a method frame
			p.mu.Lock()
			if p.armed && !p.cut && p.fromClient == fromClient {
				if p.left == 0 {
					p.cut = true
					p.mu.Unlock()
					p.closeAll()
					return
				}
				p.left--
				p.frames = append(p.frames, methodName(rest[:4]))
			}
			p.mu.Unlock()
		}
		if _, err := dst.Write(append(head, rest...)); err != nil {
			return
		}
	}
}

func methodName(b []byte) string {
	k := [2]uint16{binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])}
	names := map[[2]uint16]string{
		{60, 40}: "basic.publish", {60, 50}: "basic.return", {60, 80}: "basic.ack", {60, 120}: "basic.nack",
		{90, 10}: "tx.select", {90, 11}: "tx.select-ok", {90, 20}: "tx.commit", {90, 21}: "tx.commit-ok",
		{90, 30}: "tx.rollback", {90, 31}: "tx.rollback-ok", {85, 10}: "confirm.select",
	}
	if n, ok := names[k]; ok {
		return n
	}
	return fmt.Sprintf("%d.%d", k[0], k[1])
}
