package natsjs_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// closedAddr returns an address of loopback nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// A Publisher from FromURL publishes on a connection of its own, which
// its Close closes; the options given are applied.
func TestFromURLPublishesAndOwnsItsConnection(t *testing.T) {
	t.Parallel()
	testenv.NATS(t) // skips (or fails under CI) without the shared server
	ctx := context.Background()
	subj := testenv.Subject()
	closed := make(chan struct{})
	p, err := natsjs.FromURL(ctx, testenv.NATSURL(), natsjs.PublisherConfig{Prefix: subj},
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	testenv.Must(t, err, "FromURL")
	stream := strings.TrimSuffix(subj, ".")
	s, err := natsjs.EnsureStream(ctx, p.Conn(), natsjs.StreamConfig{Name: stream, Subjects: []string{subj + ">"}})
	testenv.Must(t, err, "stream")
	t.Cleanup(func() {
		if js, err := jetstream.New(testenv.NATS(t)); err == nil {
			_ = js.DeleteStream(context.Background(), stream)
		}
	})
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m1", Topic: "a", Payload: []byte("x")}}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	info, err := s.Info(ctx)
	testenv.Must(t, err, "info")
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
	testenv.Must(t, p.Close(), "Close")
	<-closed
	if !p.Conn().IsClosed() {
		t.Fatal("Close left the connection open")
	}
}

// FromURL refuses an invalid URL as invalid config, and its connect error
// quotes no password.
func TestFromURLErrorsQuoteNoPassword(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3tQZJ"
	ctx := context.Background()
	_, err := natsjs.FromURL(ctx, "nats://u:"+secret+"@h:bad", natsjs.PublisherConfig{})
	if !errors.Is(err, txbox.ErrInvalidConfig) || strings.Contains(err.Error(), secret) {
		t.Errorf("bad port: %v; want txbox.ErrInvalidConfig without the password", err)
	}
	url := "nats://u:" + secret + "@" + closedAddr(t)
	_, err = natsjs.FromURL(ctx, url, natsjs.PublisherConfig{}, nats.Timeout(time.Second))
	if err == nil || errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("nothing listening: %v; want a connect error", err)
	}
	if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "u:xxxxx@") {
		t.Errorf("error %q quotes the password or not the masked URL", err)
	}
	if !errors.Is(err, nats.ErrNoServers) {
		t.Errorf("error %v does not wrap nats.ErrNoServers", err)
	}
}

// IsPermanentConnectError: an invalid URL, refused credentials and a
// JetStream API error other than 503 (a stream that does not exist) are
// permanent; a server that does not answer is not.
func TestIsPermanentConnectError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := natsjs.FromURL(ctx, "nats://h:bad", natsjs.PublisherConfig{})
	if !natsjs.IsPermanentConnectError(err) {
		t.Errorf("invalid URL: %v not permanent", err)
	}
	_, err = natsjs.FromURL(ctx, "nats://"+closedAddr(t), natsjs.PublisherConfig{}, nats.Timeout(time.Second))
	if err == nil || natsjs.IsPermanentConnectError(err) {
		t.Errorf("nothing listening: %v; want an error that is not permanent", err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Username: "u", Password: "right", JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	testenv.Must(t, err, "nats server with a password")
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server with a password not ready")
	}
	host := strings.TrimPrefix(srv.ClientURL(), "nats://")
	_, err = natsjs.FromURL(ctx, "nats://u:wrong@"+host, natsjs.PublisherConfig{}, nats.MaxReconnects(0))
	if err == nil || !natsjs.IsPermanentConnectError(err) {
		t.Errorf("wrong password: %v; want a permanent error", err)
	}
	p, err := natsjs.FromURL(ctx, "nats://u:right@"+host, natsjs.PublisherConfig{})
	testenv.Must(t, err, "FromURL with the password")
	defer p.Close()
	js, err := jetstream.New(p.Conn())
	testenv.Must(t, err, "jetstream")
	_, err = js.Stream(ctx, "NO_SUCH_STREAM")
	if err == nil || !natsjs.IsPermanentConnectError(err) {
		t.Errorf("missing stream: %v; want a permanent error", err)
	}
	if natsjs.IsPermanentConnectError(nil) {
		t.Error("nil is permanent")
	}
}

// DeadLettersFromURL reads a binding's dead letters on a connection of
// its own, which its Close closes; its connect error quotes no password.
func TestDeadLettersFromURL(t *testing.T) {
	t.Parallel()
	testenv.NATS(t)
	ctx := context.Background()
	prefix := testenv.Subject()
	stream := strings.TrimSuffix(prefix, ".")
	d, err := natsjs.DeadLettersFromURL(ctx, testenv.NATSURL(), prefix)
	testenv.Must(t, err, "DeadLettersFromURL")
	js, err := jetstream.New(testenv.NATS(t))
	testenv.Must(t, err, "jetstream")
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ">"}})
	testenv.Must(t, err, "stream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	page, err := d.List(ctx, "S/durable", dlq.Query{})
	if err != nil || len(page.Letters) != 0 {
		t.Fatalf("List = %v, %v; want no dead letters", page.Letters, err)
	}
	testenv.Must(t, d.Close(), "Close")
	if _, err := d.List(ctx, "S/durable", dlq.Query{}); err == nil {
		t.Fatal("List after Close succeeded: the connection is still open")
	}
	const secret = "s3cr3tQZJ"
	_, err = natsjs.DeadLettersFromURL(ctx, "nats://u:"+secret+"@"+closedAddr(t), "", nats.Timeout(time.Second))
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("nothing listening: %v; want an error without the password", err)
	}
}
