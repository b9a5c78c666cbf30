package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxui"
)

// TestDLQPanelAndBulkInBrowser: in headless Chromium, the consumer
// dead-letter panel lists a JetStream and a Kafka dead letter (their errors
// escaped) and redrives them, which each binding then receives with its
// original id; a
// bulk redrive of the dead rows of one topic, as a dry run, lists exactly
// those rows and changes nothing, and for real redrives them and leaves
// the other dead rows dead.
func TestDLQPanelAndBulkInBrowser(t *testing.T) {
	chromium, node := browserTools(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t)
	// The backlog dies too, but for the row its key's dead message parks:
	// dead rows of ev.orders and ev.shipments.
	killer, err := relay.New[pgx.Tx](f.drv, rejectAll{}, relay.Config{MaxAttempts: 1})
	testenv.Must(t, err, "relay.New")
	_, err = killer.Round(ctx)
	testenv.Must(t, err, "round")
	ships, err := f.letters.All(ctx, dead.Filter{Topic: "ev.shipments"})
	testenv.Must(t, err, "dead of ev.shipments")
	others, err := f.letters.All(ctx, dead.Filter{Topic: "ev.orders"})
	testenv.Must(t, err, "dead of ev.orders")
	if len(ships) != 2 || len(others) < 2 {
		t.Fatalf("dead rows: %d of ev.shipments (want 2), %d of ev.orders (want >= 2)", len(ships), len(others))
	}
	seqsOf := func(ms []dead.Message) []int64 {
		out := make([]int64, len(ms))
		for i, m := range ms {
			out[i] = m.Seq
		}
		return out
	}

	// A consumer's dead letter on JetStream.
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream := strings.ToUpper(testenv.Name("UIDLQ"))
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	for name, subj := range map[string]string{stream: prefix + "ev.>", stream + "_DL": prefix + "dlq.>"} {
		_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: name, Subjects: []string{subj}})
		testenv.Must(t, err, "stream %s", name)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "shipping"})
	testenv.Must(t, err, "durable")
	binding := natsjs.Binding(stream, "shipping")
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	for _, err := range pub.Publish(ctx, []txbox.Message{{ID: "letter-1", Topic: "ev.orders", Payload: []byte(`{"order":1}`)}}) {
		testenv.Must(t, err, "publish")
	}
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")
	s, err := sub.Subscribe(ctx, binding, 1)
	testenv.Must(t, err, "subscribe")
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	d, err := s.Next(ctx)
	testenv.Must(t, err, "next")
	testenv.Must(t, d.DeadLetter(ctx, errors.New("handler <b>failed</b>")), "dead-letter")
	store, err := natsjs.NewDeadLetters(nc, prefix+"dlq.")
	testenv.Must(t, err, "dead letters")

	// And one on Kafka (franz-go's in-process kfake).
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "orders.dead"))
	testenv.Must(t, err, "kfake")
	t.Cleanup(kc.Close)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.FetchMaxWait(50*time.Millisecond))
	testenv.Must(t, err, "kgo client")
	t.Cleanup(kcl.Close)
	kpub, err := txboxkafka.NewPublisher(kcl, txboxkafka.PublisherConfig{})
	testenv.Must(t, err, "kafka publisher")
	for _, err := range kpub.Publish(ctx, []txbox.Message{{ID: "kletter-1", Topic: "orders", Key: "k1", Payload: []byte(`{"order":2}`)}}) {
		testenv.Must(t, err, "publish to kafka")
	}
	ksub, err := txboxkafka.NewSubscriber(kcl, txboxkafka.SubscriberConfig{})
	testenv.Must(t, err, "kafka subscriber")
	kbinding := txboxkafka.Binding("orders", "shipping")
	ks, err := ksub.Subscribe(ctx, kbinding, 1)
	testenv.Must(t, err, "kafka subscribe")
	t.Cleanup(func() { _ = ks.Close(context.Background()) })
	kd, err := ks.Next(ctx)
	testenv.Must(t, err, "kafka next")
	testenv.Must(t, kd.DeadLetter(ctx, errors.New("kafka handler <i>failed</i>")), "kafka dead-letter")
	kstore, err := txboxkafka.NewDeadLetters(kcl, "")
	testenv.Must(t, err, "kafka dead letters")

	const token = "t0ken-for-the-dlq-test"
	h, err := txboxui.New(txboxui.Config{
		Title: "orders outbox", Backlog: txboxui.InspectBacklog(f.in), Dead: f.letters,
		DLQ:   []txboxui.DLQRef{{Name: "nats", Binding: binding, Store: store}, {Name: "kafka", Binding: kbinding, Store: kstore}},
		Token: token, Interval: 200 * time.Millisecond,
	})
	testenv.Must(t, err, "txboxui.New")
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	br := startDrive(ctx, t, node, "drive_dlq.js", "UI_URL="+srv.URL+"/ui/", "UI_TOKEN="+token, "UI_LETTERS=letter-1,kletter-1", "UI_TOPIC=ev.shipments", "CHROMIUM="+chromium)
	type letters struct {
		Letters []struct {
			Ref, ID string
			Cells   []string
		}
		Flash string
	}
	var before, after, after2 letters
	br.step("DLQ", &before)
	hasText := func(cells []string, text string) bool {
		return slices.ContainsFunc(cells, func(c string) bool { return strings.Contains(c, text) })
	}
	if len(before.Letters) != 2 || before.Letters[0].ID != "letter-1" || !hasText(before.Letters[0].Cells, "handler <b>failed</b>") ||
		before.Letters[1].ID != "kletter-1" || before.Letters[1].Ref != "0:0" || !hasText(before.Letters[1].Cells, "kafka handler <i>failed</i>") {
		t.Fatalf("the panel shows %+v, want letter-1 (JetStream) and kletter-1 (Kafka, ref 0:0) with their errors as text", before)
	}
	br.step("DLQ_AFTER", &after)
	if len(after.Letters) != 1 || after.Letters[0].ID != "kletter-1" || !strings.Contains(after.Flash, "Redrove 1 dead letter(s).") {
		t.Fatalf("after the JetStream redrive the panel shows %+v, want kletter-1 left", after)
	}
	back, err := s.Next(ctx)
	testenv.Must(t, err, "next after the redrive")
	if m := back.Message(); m.ID != "letter-1" || string(m.Payload) != `{"order":1}` {
		t.Fatalf("redriven delivery: id %q payload %q, want letter-1 with its payload", m.ID, m.Payload)
	}
	testenv.Must(t, back.Ack(ctx), "ack")
	br.step("DLQ_AFTER", &after2)
	if len(after2.Letters) != 0 || !strings.Contains(after2.Flash, "Redrove 1 dead letter(s).") {
		t.Fatalf("after the Kafka redrive the panel shows %+v, want none left", after2)
	}
	kback, err := ks.Next(ctx)
	testenv.Must(t, err, "kafka next after the redrive")
	if m := kback.Message(); m.ID != "kletter-1" || string(m.Payload) != `{"order":2}` || m.Key != "k1" || m.Deliveries != 1 {
		t.Fatalf("redriven Kafka delivery: id %q key %q payload %q deliveries %d, want kletter-1, k1, its payload, 1", m.ID, m.Key, m.Payload, m.Deliveries)
	}
	testenv.Must(t, kback.Ack(ctx), "kafka ack")

	var dry struct {
		Would string
		Seqs  []int64
	}
	br.step("DRY", &dry)
	if !slices.Equal(dry.Seqs, seqsOf(ships)) || !strings.Contains(dry.Would, "Would redrive 2 dead message(s)") {
		t.Fatalf("dry run %+v, want the seqs %v of ev.shipments", dry, seqsOf(ships))
	}
	if left, err := f.letters.All(ctx, dead.Filter{}); err != nil || len(left) != len(ships)+len(others) {
		t.Fatalf("after the dry run: %d dead rows (%v), want %d: unchanged", len(left), err, len(ships)+len(others))
	}
	br.send("go")
	var bulk struct {
		Flash string
		Dead  []int64
	}
	br.step("BULK", &bulk)
	if !strings.Contains(bulk.Flash, "Redrove 2 dead message(s).") {
		t.Fatalf("bulk redrive says %q", bulk.Flash)
	}
	left, err := f.letters.All(ctx, dead.Filter{})
	testenv.Must(t, err, "dead after")
	if !slices.Equal(seqsOf(left), seqsOf(others)) {
		t.Fatalf("dead rows after the bulk redrive of ev.shipments: %v, want those of ev.orders %v", seqsOf(left), seqsOf(others))
	}
	br.wait()
}
