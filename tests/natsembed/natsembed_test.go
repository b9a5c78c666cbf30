package natsembed_test

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/txbox/txbox/natsembed"
)

// A port another process holds is an error at once, naming the address and
// wrapping the listen error, not a server that never becomes ready.
func TestStartBusyPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s, err := natsembed.Start(natsembed.Config{Dir: t.TempDir(), Port: port})
	if err == nil {
		s.Shutdown()
		t.Fatalf("Start on busy port %d succeeded", port)
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("Start on busy port %d: %v; want an error naming %s that wraps EADDRINUSE", port, err, l.Addr())
	}
}
