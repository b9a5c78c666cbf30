package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/pubtrace"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

func newPublisher(t *testing.T, nc *nats.Conn, cfg natsjs.PublisherConfig) *natsjs.Publisher {
	t.Helper()
	p, err := natsjs.NewPublisher(nc, cfg)
	testenv.Must(t, err, "publisher")
	return p
}

// privateNATS starts an embedded server of the test's own, with a stream
// capturing "big.>", and connects to it.
func privateNATS(t *testing.T) (*natsembed.Server, *nats.Conn) {
	t.Helper()
	srv := testenv.EmbeddedNATS(t)
	nc, err := srv.Connect()
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	_, err = natsjs.EnsureStream(context.Background(), nc, natsjs.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}})
	testenv.Must(t, err, "stream")
	return srv, nc
}

// CheckMessage refuses, as a rejection naming the reason, every subject and
// header name NATS cannot carry, and accepts the rest.
func TestCheckMessageRefusesWhatNATSRefuses(t *testing.T) {
	t.Parallel()
	_, nc := privateNATS(t)
	p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big."})
	for _, tc := range []struct {
		topic   string
		headers map[string]string
		want    string // "" accepts
	}{
		{topic: "orders.placed"},
		{topic: "a*b.c>d"}, // wildcards only as whole tokens
		{topic: "orders.placed", headers: map[string]string{"Trace-Id": "x y", "K": ""}},
		{topic: "a..b", want: "token 3 is empty"},
		{topic: ".a", want: "token 2 is empty"},
		{topic: "a.", want: "token 3 is empty"},
		{topic: "", want: "token 2 is empty"},
		{topic: "a.*", want: "wildcard *"},
		{topic: ">", want: "wildcard >"},
		{topic: "a b", want: "white space"},
		{topic: "a\tb", want: "white space"},
		{topic: "a\r\nb", want: "white space"},
		{topic: "ok", headers: map[string]string{"a:b": "v"}, want: "header name"},
		{topic: "ok", headers: map[string]string{"a b": "v"}, want: "header name"},
		{topic: "ok", headers: map[string]string{"é": "v"}, want: "header name"},
		{topic: "ok", headers: map[string]string{"a/b": "v"}, want: "header name"},
		{topic: strings.Repeat("x", 5000), want: "max control line of 4096 bytes"},
	} {
		err := p.CheckMessage(txbox.Message{ID: "id-1", Topic: tc.topic, Headers: tc.headers, Payload: []byte("p")})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("topic %q headers %v: %v, want it accepted", tc.topic, tc.headers, err)
		case tc.want != "" && (err == nil || !txbox.IsRejected(err) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("topic %.20q headers %v: %v, want a rejection naming %q", tc.topic, tc.headers, err, tc.want)
		}
	}
}

// The limits CheckMessage computes are the server's, to the byte: the
// longest subject it accepts is published and acknowledged, and one byte
// more makes the server close the connection that sends it; a message of
// exactly the server's max payload is acknowledged, one byte more refused.
func TestCheckMessageLimitsAreExact(t *testing.T) {
	t.Parallel()
	srv, nc := privateNATS(t)
	p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big."})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := txbox.Message{ID: "limit-1", Headers: map[string]string{"Trace-Id": "abc"}, Payload: []byte("payload")}

	// The longest topic CheckMessage accepts.
	n := 5000
	for ; n > 0; n-- {
		m.Topic = strings.Repeat("x", n)
		if p.CheckMessage(m) == nil {
			break
		}
	}
	t.Logf("longest accepted subject: %d bytes", len("big.")+n)
	if n < 4000 {
		t.Fatalf("longest accepted topic is %d bytes, want about 4096 - 60", n)
	}
	if errs := p.Publish(ctx, []txbox.Message{m}); errs != nil {
		t.Fatalf("publish the longest accepted subject: %v", errs[0])
	}
	// One byte more, sent as jetstream would (same reply length, headers
	// and payload) on a connection of its own: the server closes it.
	raw, err := srv.Connect(nats.NoReconnect())
	testenv.Must(t, err, "connect")
	defer raw.Close()
	msg := p.Msg(txbox.Message{ID: m.ID, Topic: m.Topic + "x", Headers: m.Headers, Payload: m.Payload})
	msg.Subject = "big." + m.Topic + "x"
	msg.Reply = nats.InboxPrefix + "abcdef.ghijkl"
	testenv.Must(t, raw.PublishMsg(msg), "raw publish")
	_ = raw.Flush()
	testenv.Await(t, "the server closing the connection", func() (bool, string) {
		return raw.IsClosed(), fmt.Sprint(raw.Status(), raw.LastError())
	})
	if !raw.IsClosed() || !strings.Contains(raw.LastError().Error(), "maximum control line") {
		t.Fatalf("one byte over the accepted subject: closed %v, last error %v; want the server to close the connection", raw.IsClosed(), raw.LastError())
	}
	long := m
	long.Topic += "x"
	if err := p.CheckMessage(long); err == nil || !txbox.IsRejected(err) {
		t.Fatalf("CheckMessage(one byte over) = %v, want a rejection", err)
	}

	// Size: header block (Nats-Msg-Id included) plus payload.
	limit := int(nc.MaxPayload())
	m = txbox.Message{ID: "size-1", Topic: "size", Headers: map[string]string{"Trace-Id": "abc"}}
	hdr := len("NATS/1.0\r\n") + len("Trace-Id: abc\r\n") + len(jetstream.MsgIDHeader+": size-1\r\n") + len("\r\n")
	m.Payload = bytes.Repeat([]byte("p"), limit-hdr)
	if err := p.CheckMessage(m); err != nil {
		t.Fatalf("a message of exactly max payload (%d bytes): %v", limit, err)
	}
	if errs := p.Publish(ctx, []txbox.Message{m}); errs != nil {
		t.Fatalf("publish a message of exactly max payload: %v", errs[0])
	}
	m.Payload = append(m.Payload, 'p')
	err = p.CheckMessage(m)
	if err == nil || !txbox.IsRejected(err) || !errors.Is(err, txbox.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "max payload") {
		t.Fatalf("one byte over max payload: %v, want a rejection naming the limit", err)
	}
}

// A connection closed for good, by its owner or by the server, fails every
// publish with txbox.ErrPublisherClosed (not a rejection, and not a
// timeout), naming the server's reason.
func TestClosedConnectionFailsForGood(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, p *natsjs.Publisher, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		errs := p.Publish(ctx, []txbox.Message{{ID: "a", Topic: "t1", Payload: []byte("x")}, {ID: "b", Topic: "t2", Payload: []byte("y")}})
		if len(errs) != 2 {
			t.Fatalf("errs = %v, want two", errs)
		}
		for _, err := range errs {
			if !errors.Is(err, txbox.ErrPublisherClosed) || txbox.IsRejected(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("%v, want txbox.ErrPublisherClosed naming %q", err, want)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("publish on a closed connection took %s", d)
		}
		if p.Connected() {
			t.Error("Connected() on a closed connection")
		}
	}
	t.Run("by its owner", func(t *testing.T) {
		t.Parallel()
		_, nc := privateNATS(t)
		p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big."})
		nc.Close()
		check(t, p, "connection closed")
	})
	t.Run("by the server", func(t *testing.T) {
		t.Parallel()
		_, nc := privateNATS(t)
		p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big."})
		// What the relay used to send for a row with a 5,000-character topic.
		_ = nc.Publish("big."+strings.Repeat("x", 5000), []byte("x"))
		_ = nc.Flush()
		testenv.Await(t, "the server closing the connection", func() (bool, string) {
			return nc.IsClosed(), fmt.Sprint(nc.Status(), nc.LastError())
		})
		check(t, p, "maximum control line exceeded")
	})
}

// While the connection is reconnecting, publishes fail at once and
// transiently, and Connected says so; after the server is back they succeed.
func TestReconnectingFailsFastTransiently(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := natsembed.Start(natsembed.Config{Dir: dir})
	testenv.Must(t, err, "start nats")
	port := srv.Port()
	nc, err := srv.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	testenv.Must(t, err, "connect")
	defer nc.Close()
	_, err = natsjs.EnsureStream(context.Background(), nc, natsjs.StreamConfig{Name: "R", Subjects: []string{"r.>"}})
	testenv.Must(t, err, "stream")
	p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "r."})
	srv.Shutdown()
	for nc.IsConnected() {
		time.Sleep(5 * time.Millisecond)
	}
	if p.Connected() {
		t.Fatal("Connected() while the server is down")
	}
	start := time.Now()
	testenv.PublishFailsTransiently(t, p)
	if d := time.Since(start); d > time.Second {
		t.Errorf("publish while reconnecting took %s, want it to fail at once", d)
	}
	srv, err = natsembed.Start(natsembed.Config{Dir: dir, Port: port})
	testenv.Must(t, err, "restart nats")
	defer srv.Shutdown()
	testenv.Await(t, "the publisher connected again", func() (bool, string) { return p.Connected(), "" })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if errs := p.Publish(ctx, []txbox.Message{{ID: "after", Topic: "x", Payload: []byte("x")}}); errs != nil {
		t.Fatalf("publish after the server came back: %v", errs[0])
	}
}

// A message JetStream acknowledges as a duplicate (same Nats-Msg-Id inside
// the duplicate window) counts as published, is counted by Duplicates and
// logged at debug with its id, and told to the call's pubtrace.Trace.
func TestDuplicateAcksAreCounted(t *testing.T) {
	t.Parallel()
	_, nc := privateNATS(t)
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big.", Logger: log})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := []txbox.Message{{ID: "dup-1", Topic: "d", Payload: []byte("1")}, {ID: "dup-2", Topic: "d", Payload: []byte("2")}}
	// The first call's trace hears of no duplicate, the second's of both,
	// by their index in the call.
	var told [2][]int
	var mu sync.Mutex
	for call := range 2 {
		trace := &pubtrace.Trace{Duplicate: func(i int) {
			mu.Lock()
			defer mu.Unlock()
			told[call] = append(told[call], i)
		}}
		if errs := p.Publish(pubtrace.With(ctx, trace), msgs); errs != nil {
			t.Fatalf("publish: %v", errs)
		}
	}
	if got := p.Duplicates(); got != 2 {
		t.Fatalf("Duplicates() = %d, want 2", got)
	}
	slices.Sort(told[1])
	if len(told[0]) != 0 || !slices.Equal(told[1], []int{0, 1}) {
		t.Fatalf("traces told of duplicates %v (first call) and %v (second); want none and [0 1]", told[0], told[1])
	}
	for _, id := range []string{"id=dup-1", "id=dup-2"} {
		if !strings.Contains(logs.String(), id) || !strings.Contains(logs.String(), "level=DEBUG") {
			t.Fatalf("no debug line with %s in:\n%s", id, logs.String())
		}
	}
}
