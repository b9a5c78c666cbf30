// Package natsembed runs a NATS server with JetStream inside the process:
// txbox's zero-setup broker, used by `txbox demo`, by `txbox relay` when no
// broker URL is given, and by tests that must stop and restart a broker.
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures an embedded server.
type Config struct {
	// Dir holds JetStream's file storage. Required: messages survive a
	// restart on the same Dir.
	Dir string
	// Host to listen on. Default: 127.0.0.1.
	Host string
	// Port to listen on. Default: 0, a free port chosen by the system
	// (see Server.ClientURL); -1 listens on no port (in-process only).
	Port int
	// StartTimeout bounds the wait for the server to accept clients.
	// Default: 10s.
	StartTimeout time.Duration
}

// Server is a running embedded NATS server.
type Server struct {
	ns *server.Server
}

// Start starts a server and waits until it accepts clients. A Port that
// cannot be listened on (another process holds it) is an error at once.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("natsembed: Config.Dir is required (JetStream's storage)")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if cfg.Port > 0 {
		// The server notices a busy port only when StartTimeout runs out.
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("natsembed: cannot listen on %s: %w", addr, err)
		}
		_ = l.Close()
	}
	opts := &server.Options{
		ServerName: "txbox-embedded",
		Host:       cfg.Host,
		Port:       port,
		DontListen: cfg.Port == -1,
		JetStream:  true,
		StoreDir:   cfg.Dir,
		NoSigs:     true,
		NoLog:      true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(cfg.StartTimeout) {
		ns.Shutdown()
		return nil, fmt.Errorf("natsembed: server not ready after %s (is %s:%d free?)", cfg.StartTimeout, cfg.Host, cfg.Port)
	}
	return &Server{ns: ns}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Port is the port the server listens on.
func (s *Server) Port() int {
	if a, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Connect opens a client connection to the server (in-process when the
// server listens on no port). The caller closes it.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	if s.ns.Addr() == nil {
		opts = append(opts, nats.InProcessServer(s.ns))
	}
	return nats.Connect(s.ClientURL(), opts...)
}

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
