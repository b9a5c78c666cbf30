package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// A Publisher from FromURL publishes on a connection of its own, which
// its Close closes.
func TestFromURLPublishesAndOwnsItsConnection(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	q := queue(t, url)
	ctx := context.Background()
	p, err := txboxrabbitmq.FromURL(ctx, url, txboxrabbitmq.PublisherConfig{}, txboxrabbitmq.ConnConfig{})
	testenv.Must(t, err, "FromURL")
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m1", Topic: q, Payload: []byte("x")}}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if d, ok := get(t, url, q); !ok || d.MessageId != "m1" {
		t.Fatalf("queue holds %v %q; want m1", ok, d.MessageId)
	}
	testenv.Must(t, p.Close(), "Close")
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m2", Topic: q, Payload: []byte("x")}}); errs == nil {
		t.Fatal("Publish after Close succeeded: the connection is still open")
	}
}

// FromURL refuses an exchange that does not exist, saying how to declare
// it, and bad credentials, with errors that quote no password and keep
// the broker's error.
func TestFromURLRefusesMissingExchangeAndBadLogin(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	ctx := context.Background()
	x := testenv.Name("nox")
	_, err := txboxrabbitmq.FromURL(ctx, url, txboxrabbitmq.PublisherConfig{Exchange: x}, txboxrabbitmq.ConnConfig{})
	var ae *amqp.Error
	if err == nil || !strings.Contains(err.Error(), "declare it first") || !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Errorf("missing exchange: %v; want a NOT_FOUND amqp.Error saying to declare it", err)
	}
	const secret = "s3cr3tQZJ"
	user, rest, _ := strings.Cut(strings.TrimPrefix(url, "amqp://"), "@")
	name, _, _ := strings.Cut(user, ":")
	bad := "amqp://" + name + ":" + secret + "@" + rest
	_, err = txboxrabbitmq.FromURL(ctx, bad, txboxrabbitmq.PublisherConfig{}, txboxrabbitmq.ConnConfig{})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), ":xxxxx@") {
		t.Errorf("bad password: %v; want an error quoting the URL without the password", err)
	}
	if !errors.Is(err, amqp.ErrSASL) && !errors.As(err, &ae) {
		t.Errorf("bad password: %v does not keep the broker's error", err)
	}
	if !txboxrabbitmq.IsPermanentConnectError(err) {
		t.Errorf("bad password: %v not permanent", err)
	}
	_, err = txboxrabbitmq.FromURL(ctx, "amqp://u:"+secret+"@h:bad/", txboxrabbitmq.PublisherConfig{}, txboxrabbitmq.ConnConfig{})
	if !errors.Is(err, txbox.ErrInvalidConfig) || strings.Contains(err.Error(), secret) {
		t.Errorf("bad port: %v; want txbox.ErrInvalidConfig without the password", err)
	}
	if !txboxrabbitmq.IsPermanentConnectError(err) {
		t.Errorf("bad port: %v not permanent", err)
	}
}

// IsPermanentConnectError: a missing exchange and a missing virtual host
// are permanent; a broker that does not answer is not.
func TestIsPermanentConnectError(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	ctx := context.Background()
	_, err := txboxrabbitmq.FromURL(ctx, url, txboxrabbitmq.PublisherConfig{Exchange: testenv.Name("nox")}, txboxrabbitmq.ConnConfig{})
	if err == nil || !txboxrabbitmq.IsPermanentConnectError(err) {
		t.Errorf("missing exchange: %v; want a permanent error", err)
	}
	u, perr := amqp.ParseURI(url)
	testenv.Must(t, perr, "parse url")
	u.Vhost = testenv.Name("novhost")
	_, err = txboxrabbitmq.FromURL(ctx, u.String(), txboxrabbitmq.PublisherConfig{}, txboxrabbitmq.ConnConfig{})
	if err == nil || !txboxrabbitmq.IsPermanentConnectError(err) {
		t.Errorf("missing virtual host: %v; want a permanent error", err)
	}
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, lerr, "listen")
	addr := ln.Addr().String()
	_ = ln.Close()
	_, err = txboxrabbitmq.FromURL(ctx, "amqp://guest:guest@"+addr+"/", txboxrabbitmq.PublisherConfig{}, txboxrabbitmq.ConnConfig{})
	if err == nil || txboxrabbitmq.IsPermanentConnectError(err) {
		t.Errorf("nothing listening: %v; want an error that is not permanent", err)
	}
	if txboxrabbitmq.IsPermanentConnectError(nil) {
		t.Error("nil is permanent")
	}
}

// DeadLettersFromURL reads a queue's dead letters on a connection of its
// own, which its Close closes; its errors quote no password.
func TestDeadLettersFromURL(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	q := queue(t, url)
	ctx := context.Background()
	d, err := txboxrabbitmq.DeadLettersFromURL(ctx, url, txboxrabbitmq.ConnConfig{})
	testenv.Must(t, err, "DeadLettersFromURL")
	page, err := d.List(ctx, q, dlq.Query{})
	if err != nil || len(page.Letters) != 0 {
		t.Fatalf("List = %v, %v; want no dead letters", page.Letters, err)
	}
	testenv.Must(t, d.Close(), "Close")
	if _, err := d.List(ctx, q, dlq.Query{}); err == nil {
		t.Fatal("List after Close succeeded: the connection is still open")
	}
	const secret = "s3cr3tQZJ"
	user, rest, _ := strings.Cut(strings.TrimPrefix(url, "amqp://"), "@")
	name, _, _ := strings.Cut(user, ":")
	_, err = txboxrabbitmq.DeadLettersFromURL(ctx, "amqp://"+name+":"+secret+"@"+rest, txboxrabbitmq.ConnConfig{})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), ":xxxxx@") {
		t.Errorf("bad password: %v; want an error quoting the URL without the password", err)
	}
}
