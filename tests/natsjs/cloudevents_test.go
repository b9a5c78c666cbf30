package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// What the relay publishes with CloudEventsSource set, from rows written
// with plain SQL, is read by the CloudEvents Go SDK's NATS JetStream
// binding as the event txbox means: every attribute, datacontenttype
// included (ce-datacontenttype, whatever the case the writer gave
// Content-Type), with the values percent-encoded as the NATS binding
// requires (the SDK hands them over encoded; one round of decoding gives
// the row's id, topic and source back), and no extension. A row with its
// own CE-ID header is parked dead and never published.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nc := privateNATS(t)
	sub, err := nc.SubscribeSync("big.>")
	testenv.Must(t, err, "subscribe")
	const source = "/shop/orders%2Fv1"
	p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big.", CloudEventsSource: source})
	rows := testenv.CERows(func(s string) string { return "ce." + s }, "CE-ID")
	testenv.RelayCERows(t, p, rows)
	byID := map[string]testenv.CERow{}
	for _, r := range rows {
		if !r.Forged {
			byID[r.ID] = r
		}
	}
	decode := func(what, v string) string { return testenv.PercentDecode(t, what, v) }
	for n := len(byID); n > 0; n-- {
		m, err := sub.NextMsg(10 * time.Second)
		testenv.Must(t, err, "read")
		e, err := binding.ToEvent(ctx, cejs.NewMessage(m))
		testenv.Must(t, err, "the SDK reads %s %v", m.Subject, m.Header)
		id := decode("id", e.ID())
		r, ok := byID[id]
		if !ok {
			t.Fatalf("read event %q (headers %v), not one of the rows left to read", id, m.Header)
		}
		delete(byID, id)
		testenv.CheckCloudEvent(t, e, r, source, decode)
	}
}

// With CloudEventsSource set, CheckMessage refuses a header named ce-*
// in any case, as a rejection wrapping txbox.ErrReservedHeader; without
// it, such a header is an ordinary one.
func TestCheckMessageReservesCloudEventsNames(t *testing.T) {
	t.Parallel()
	_, nc := privateNATS(t)
	on := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big.", CloudEventsSource: "/shop"})
	off := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big."})
	for _, name := range []string{"ce-id", "CE-ID", "Ce-Source", "ce-datacontenttype", "ce-x"} {
		m := txbox.Message{ID: "m", Topic: "t", Headers: map[string]string{name: "v"}}
		if err := on.CheckMessage(m); !txbox.IsRejected(err) || !errors.Is(err, txbox.ErrReservedHeader) {
			t.Errorf("CloudEvents on, header %q: %v; want a rejection wrapping ErrReservedHeader", name, err)
		}
		if err := off.CheckMessage(m); err != nil {
			t.Errorf("CloudEvents off, header %q: %v", name, err)
		}
	}
	if err := on.CheckMessage(txbox.Message{ID: "m", Topic: "t", Headers: map[string]string{"cex-id": "v", "Content-Type": "a/b"}}); err != nil {
		t.Errorf("CloudEvents on, ordinary headers: %v", err)
	}
}
