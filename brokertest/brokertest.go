// Package brokertest is the conformance suite every txbox broker adapter
// runs, exported so that an adapter outside this module can run it too.
// Watermill's pub/sub test suite, with its features struct, is the model:
// Features says what the broker supports and the suite adapts.
//
//	func TestConformance(t *testing.T) {
//		brokertest.TestPublisher(t, func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
//			… // a publisher and a reader on a broker isolated for t
//		}, brokertest.Features{Dedupe: true, PerKeyOrder: true, Headers: true})
//	}
package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/pubtrace"
)

// Features says what a broker supports.
type Features struct {
	// Dedupe: the broker drops a re-publish of a message id it has seen
	// (within its window). Without it the suite checks that both copies
	// arrive with the same id, for the consumer's inbox to drop.
	Dedupe bool
	// PerKeyOrder: messages of one key, published in one or successive
	// Publish calls, are delivered in that order.
	PerKeyOrder bool
	// Headers: message headers are delivered.
	Headers bool
	// Reject, when set, returns a message on topic that the broker refuses
	// for the message itself (too large, a topic that cannot exist …): its
	// Publish error must be txbox.IsRejected. Nil skips that test.
	Reject func(t *testing.T, topic string) txbox.Message
	// Timeout bounds each wait for deliveries. Default: 30s.
	Timeout time.Duration
}

// Delivery is a message as a consumer of the broker received it.
type Delivery struct {
	ID      string // the message id as the broker carries it
	Key     string // where the broker carries keys; else ""
	Payload []byte
	Headers map[string]string // user headers, without the broker's own id header
}

// Reader reads what a publisher sent, as a consumer of the broker would.
type Reader interface {
	// Read waits until at least n messages of topic have arrived (or ctx
	// ends) and returns every message of topic received so far, in the
	// order the broker delivered them. For a broker with Dedupe or
	// PerKeyOrder, that order must be the publish order a single consumer
	// of the topic sees.
	Read(ctx context.Context, topic string, n int) ([]Delivery, error)
}

// NewFunc returns a publisher and a reader of the same broker, isolated for
// t (unique streams, queues or topic prefixes); cleanup goes to t.Cleanup.
// Topics the suite uses are unique per test, begin with TopicPrefix and
// match [a-z0-9_.]+.
type NewFunc func(t *testing.T) (txbox.Publisher, Reader)

// TopicPrefix begins every topic the suite publishes to (Reject's topic
// argument included), so that a broker routing by pattern can route them
// all before the first publish (a RabbitMQ queue bound to TopicPrefix+"#"
// on a topic exchange), and Reject can make a topic unroutable by giving
// it another prefix.
const TopicPrefix = "bt."

var seq atomic.Int64

func init() { seq.Store(time.Now().UnixNano()) }

// topic returns a topic unique to t.
func topic(t *testing.T) string {
	name := strings.ToLower(t.Name())
	name = name[strings.LastIndex(name, "/")+1:]
	return TopicPrefix + strings.Trim(name, "_.") + "." + strconv.FormatInt(seq.Add(1), 36)
}

func (f Features) timeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return 30 * time.Second
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// TestPublisher runs the publisher conformance tests as parallel subtests.
func TestPublisher(t *testing.T, newPub NewFunc, f Features) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newPub NewFunc, f Features)
	}{
		{"PublishCarriesID", testCarriesID},
		{"Dedupe", testDedupe},
		{"Headers", testHeaders},
		{"ReservedHeadersCannotOverrideID", testReserved},
		{"PerKeyOrder", testPerKeyOrder},
		{"Rejected", testRejected},
		{"AlignedErrors", testAligned},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newPub, f)
		})
	}
}

func read(t *testing.T, f Features, r Reader, topic string, n int) []Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout())
	defer cancel()
	ds, err := r.Read(ctx, topic, n)
	if err != nil {
		t.Fatalf("read %d messages of %s: got %d: %v", n, topic, len(ds), err)
	}
	return ds
}

func publish(t *testing.T, p txbox.Publisher, msgs ...txbox.Message) {
	t.Helper()
	publishCtx(t, context.Background(), p, msgs...)
}

// publishCtx is publish with ctx (a pubtrace.Trace, say).
func publishCtx(t *testing.T, ctx context.Context, p txbox.Publisher, msgs ...txbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if errs := p.Publish(ctx, msgs); errs != nil {
		if len(errs) != len(msgs) {
			t.Fatalf("Publish returned %d errors for %d messages", len(errs), len(msgs))
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("publish message %d (%s): %v", i, msgs[i].ID, err)
			}
		}
		t.Fatalf("Publish returned a non-nil slice of nil errors: want nil when every message was acknowledged")
	}
}

func testCarriesID(t *testing.T, newPub NewFunc, f Features) {
	p, r := newPub(t)
	tp := topic(t)
	var msgs []txbox.Message
	for i := range 20 {
		msgs = append(msgs, txbox.Message{ID: newID(), Topic: tp, Payload: []byte("payload " + strconv.Itoa(i))})
	}
	publish(t, p, msgs...)
	ds := read(t, f, r, tp, len(msgs))
	got := map[string]string{}
	for _, d := range ds {
		got[d.ID] = string(d.Payload)
	}
	for _, m := range msgs {
		if got[m.ID] != string(m.Payload) {
			t.Errorf("message %s: delivered payload %q, want %q", m.ID, got[m.ID], m.Payload)
		}
	}
	if len(ds) != len(msgs) {
		t.Errorf("delivered %d messages, published %d", len(ds), len(msgs))
	}
}

// testDedupe publishes a message, then the same message again and a later
// sentinel, and reads up to the sentinel.
func testDedupe(t *testing.T, newPub NewFunc, f Features) {
	p, r := newPub(t)
	tp := topic(t)
	m := txbox.Message{ID: newID(), Topic: tp, Key: "k", Payload: []byte("once")}
	publish(t, p, m)
	read(t, f, r, tp, 1)
	// The relay's crash-after-publish re-send, which a publisher that
	// counts duplicates (txbox.DuplicateCounter) counts, and tells the
	// call's pubtrace.Trace of: the relay counts only what the trace hears.
	dc, counts := p.(txbox.DuplicateCounter)
	var before int64
	if counts {
		before = dc.Duplicates()
	}
	var told []int
	var mu sync.Mutex
	trace := &pubtrace.Trace{Duplicate: func(i int) { mu.Lock(); told = append(told, i); mu.Unlock() }}
	publishCtx(t, pubtrace.With(context.Background(), trace), p, m)
	if counts && f.Dedupe {
		if got := dc.Duplicates() - before; got != 1 {
			t.Errorf("Duplicates() rose by %d on a re-publish, want 1", got)
		}
		mu.Lock()
		if len(told) != 1 || told[0] != 0 {
			t.Errorf("the re-publish's pubtrace.Trace heard of duplicates %v, want [0]: a DuplicateCounter must tell the trace of each duplicate", told)
		}
		mu.Unlock()
	}
	sentinel := txbox.Message{ID: newID(), Topic: tp, Key: "k", Payload: []byte("sentinel")}
	publish(t, p, sentinel)
	want := 3
	if f.Dedupe {
		want = 2
	}
	ds := read(t, f, r, tp, want)
	copies := 0
	for _, d := range ds {
		if d.ID == m.ID {
			copies++
		}
	}
	if f.Dedupe && copies != 1 {
		t.Fatalf("broker with Dedupe delivered %d copies of a re-published id", copies)
	}
	if !f.Dedupe && copies != 2 {
		t.Fatalf("broker without Dedupe delivered %d copies of a message published twice, want 2 carrying its id", copies)
	}
}

func testHeaders(t *testing.T, newPub NewFunc, f Features) {
	if !f.Headers {
		t.Skip("broker has no headers")
	}
	p, r := newPub(t)
	tp := topic(t)
	m := txbox.Message{ID: newID(), Topic: tp, Payload: []byte("h"), Headers: map[string]string{
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"X-Tenant":    "acme",
		"empty":       "",
	}}
	publish(t, p, m)
	ds := read(t, f, r, tp, 1)
	for k, v := range m.Headers {
		if got, ok := ds[0].Headers[k]; !ok || got != v {
			if v == "" && !ok {
				continue // some brokers drop empty values
			}
			t.Errorf("header %q: got %q (present %v), want %q", k, got, ok, v)
		}
	}
}

// testReserved publishes a row as plain SQL could have written it (not
// validated by Add), with headers that try to set the message's identity.
func testReserved(t *testing.T, newPub NewFunc, f Features) {
	p, r := newPub(t)
	tp := topic(t)
	const evil = "evil-id"
	hs := map[string]string{"ok": "1"}
	for _, h := range []string{"Message-Id", "message_id", "MessageId", "Nats-Msg-Id", "Txbox-Id", "id", "key", "payload"} {
		hs[h] = evil
	}
	m := txbox.Message{ID: newID(), Topic: tp, Key: "real-key", Payload: []byte("real"), Headers: hs}
	publish(t, p, m)
	ds := read(t, f, r, tp, 1)
	d := ds[0]
	if d.ID != m.ID {
		t.Fatalf("delivered id %q, want %q: a header overrode the identity", d.ID, m.ID)
	}
	if string(d.Payload) != "real" {
		t.Fatalf("delivered payload %q: a header overrode it", d.Payload)
	}
	if d.Key != "" && d.Key != m.Key {
		t.Fatalf("delivered key %q: a header overrode it", d.Key)
	}
	for k, v := range d.Headers {
		if txbox.IsReservedHeader(k) && v == evil {
			t.Errorf("reserved header %q was delivered", k)
		}
	}
}

func testPerKeyOrder(t *testing.T, newPub NewFunc, f Features) {
	if !f.PerKeyOrder {
		t.Skip("broker does not keep per-key order")
	}
	p, r := newPub(t)
	tp := topic(t)
	const keys, per = 5, 40
	var all []txbox.Message
	for round := range 4 { // several Publish calls, each interleaving keys
		var batch []txbox.Message
		for i := range per / 4 {
			for k := range keys {
				n := round*(per/4) + i
				batch = append(batch, txbox.Message{ID: newID(), Topic: tp, Key: fmt.Sprintf("key-%d", k), Payload: []byte(strconv.Itoa(n))})
			}
		}
		publish(t, p, batch...)
		all = append(all, batch...)
	}
	ds := read(t, f, r, tp, len(all))
	key := map[string]string{}
	for _, m := range all {
		key[m.ID] = m.Key
	}
	last := map[string]int{}
	for _, d := range ds {
		n, _ := strconv.Atoi(string(d.Payload))
		k := key[d.ID]
		if prev, ok := last[k]; ok && n <= prev {
			t.Fatalf("key %s: message %d delivered after %d", k, n, prev)
		}
		last[k] = n
	}
}

func testRejected(t *testing.T, newPub NewFunc, f Features) {
	if f.Reject == nil {
		t.Skip("no way to make this broker reject a message")
	}
	p, r := newPub(t)
	tp := topic(t)
	bad := f.Reject(t, tp+".bad")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := p.Publish(ctx, []txbox.Message{bad})
	if len(errs) != 1 || errs[0] == nil {
		t.Fatalf("Publish of a message the broker refuses: %v, want one error", errs)
	}
	if !txbox.IsRejected(errs[0]) {
		t.Fatalf("error %v is not txbox.IsRejected", errs[0])
	}
	_ = r
}

// testAligned publishes a batch with refused messages in the middle: the
// errors line up with the messages and the good ones are delivered.
func testAligned(t *testing.T, newPub NewFunc, f Features) {
	if f.Reject == nil {
		t.Skip("no way to make this broker reject a message")
	}
	p, r := newPub(t)
	tp := topic(t)
	var msgs []txbox.Message
	bad := map[int]bool{1: true, 4: true}
	for i := range 6 {
		if bad[i] {
			m := f.Reject(t, tp+".bad"+strconv.Itoa(i))
			msgs = append(msgs, m)
			continue
		}
		msgs = append(msgs, txbox.Message{ID: newID(), Topic: tp, Payload: []byte(strconv.Itoa(i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := p.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if bad[i] != (err != nil) {
			t.Errorf("message %d: error %v, want error: %v", i, err, bad[i])
		}
		if err != nil && !txbox.IsRejected(err) {
			t.Errorf("message %d: error %v is not txbox.IsRejected", i, err)
		}
	}
	ds := read(t, f, r, tp, len(msgs)-len(bad))
	if len(ds) != len(msgs)-len(bad) {
		t.Errorf("delivered %d, want %d", len(ds), len(msgs)-len(bad))
	}
}
