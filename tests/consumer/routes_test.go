package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// routedMsg is a message of the routes test: its id, version and content
// type, and the handler that must claim it ("" for none).
type routedMsg struct{ id, version, ctype, want string }

var routedMsgs = []routedMsg{
	{"v1-json-a", "1", "application/json", "orders.v1.json"},
	{"v1-json-b", "1", "Application/JSON; charset=utf-8", "orders.v1.json"},
	{"v1-flaky", "1", "application/json", "orders.v1.json"}, // fails once, then runs
	{"v1-text", "1", "text/plain", "orders.v1.other"},
	{"v1-bare", "1", "", "orders.v1.other"},
	{"v2-a", "2", "application/json", "orders.v2"},
	{"v2-b", "2", "", "orders.v2"},
	{"v2-fail", "2", "", "orders.v2"}, // fails once: MaxDeliveries 1 on this route
	{"v3", "3", "application/json", ""},
	{"no-version", "", "application/json", ""},
}

// Several handlers on one binding: deliveries are dispatched by version and
// content type to inbox and at-least-once handlers, each with its own name
// (the inbox source, in the one shared inbox table) and retry policy, and
// the ones no route claims are dead-lettered with ErrUnrouted, on each
// broker with PostgreSQL. A second binding acks its unrouted deliveries
// and reports them to the Observer.
func TestRoutes(t *testing.T) {
	t.Parallel()
	for _, kind := range e2eBrokers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t, kind)
			d := pgxDB(t, 8)
			d.migrateAll(t)
			effects := testenv.Name("routed")
			d.exec(t, "CREATE TABLE "+effects+" (handler text NOT NULL, id text NOT NULL, PRIMARY KEY (handler, id))")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet, Unrouted: consumer.UnroutedDeadLetter,
				BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
			testenv.Must(t, err, "New")
			var mu sync.Mutex
			failed := map[string]bool{}
			atLeastOnce := map[string]int{}
			insert := func(name string) func(context.Context, pgx.Tx, consumer.Message) error {
				return func(ctx context.Context, tx pgx.Tx, m consumer.Message) error {
					mu.Lock()
					fail := strings.Contains(m.ID, "-flaky") || strings.Contains(m.ID, "-fail")
					fail = fail && !failed[m.ID]
					failed[m.ID] = true
					mu.Unlock()
					if fail {
						return fmt.Errorf("first delivery of %s fails", m.ID)
					}
					_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (handler, id) VALUES ($1, $2)", name, m.ID)
					return err
				}
			}
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "orders.v1.json", Binding: b.binding("orders"),
				Route: consumer.Route{Version: "1", ContentType: "application/json"}}, insert("orders.v1.json")), "register")
			testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "orders.v1.other", Binding: b.binding("orders"),
				Route: consumer.Route{Version: "1"}}, func(_ context.Context, m consumer.Message) error {
				mu.Lock()
				atLeastOnce[m.ID]++
				mu.Unlock()
				return nil
			}), "register")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "orders.v2", Binding: b.binding("orders"), MaxDeliveries: 1,
				Route: consumer.Route{Version: "2"}}, insert("orders.v2")), "register")
			testenv.Must(t, c.Start(ctx), "start")
			defer func() { _ = c.Stop(context.Background()) }()

			var msgs []txbox.Message
			for _, m := range routedMsgs {
				h := map[string]string{}
				if m.version != "" {
					h[consumer.DefaultVersionHeader] = m.version
				}
				if m.ctype != "" {
					h["Content-Type"] = m.ctype
				}
				msgs = append(msgs, txbox.Message{ID: testenv.Name(m.id), Topic: b.topic("orders"), Payload: []byte(`{}`), Headers: h})
			}
			if errs := b.pub.Publish(ctx, msgs); errs != nil {
				t.Fatalf("publish: %v", errs)
			}
			// Handled: v1 JSON ×3, v1 other ×2, v2 ×2; dead letters: v2-fail,
			// v3, no-version.
			eventually(t, "every message settled", func() bool {
				s := c.Stats()
				return s.Handled == 7 && s.DeadLettered == 3
			})
			want := map[string]bool{}
			for i, m := range routedMsgs {
				if m.want != "" && m.want != "orders.v1.other" && m.id != "v2-fail" {
					want[m.want+" "+msgs[i].ID] = true
				}
			}
			rows, err := d.drv.Pool().Query(ctx, "SELECT handler, id FROM "+effects)
			testenv.Must(t, err, "effects")
			got := map[string]bool{}
			for rows.Next() {
				var h, id string
				testenv.Must(t, rows.Scan(&h, &id), "scan")
				got[h+" "+id] = true
			}
			rows.Close()
			if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
				t.Errorf("effects %v, want %v", sorted(got), sorted(want))
			}
			// The inbox handlers share the inbox table, each under its name.
			if n := d.count(t, "SELECT count(*) FROM txbox_inbox WHERE source = 'orders.v1.json'"); n != 3 {
				t.Errorf("%d inbox receipts of orders.v1.json, want 3", n)
			}
			if n := d.count(t, "SELECT count(*) FROM txbox_inbox WHERE source = 'orders.v2'"); n != 2 {
				t.Errorf("%d inbox receipts of orders.v2, want 2", n)
			}
			mu.Lock()
			if len(atLeastOnce) != 2 || atLeastOnce[msgs[3].ID] != 1 || atLeastOnce[msgs[4].ID] != 1 {
				t.Errorf("at-least-once handler ran %v, want %s and %s once", atLeastOnce, msgs[3].ID, msgs[4].ID)
			}
			mu.Unlock()
			dead := b.deadLetters(t, "orders")
			for _, i := range []int{8, 9} {
				if e := dead[msgs[i].ID][b.errHeader]; !strings.Contains(e, "no route claims the message") {
					t.Errorf("dead letter of %s: error %q, want the unrouted error", routedMsgs[i].id, e)
				}
			}
			if e := dead[msgs[7].ID][b.errHeader]; !strings.Contains(e, "first delivery of") {
				t.Errorf("dead letter of v2-fail: error %q, want the handler's (MaxDeliveries 1 on its route)", e)
			}
			// v1-flaky is retried (the default MaxDeliveries); v2-fail is
			// dead-lettered at its first failure (its route's MaxDeliveries 1).
			if s := c.Stats(); s.Unrouted != 2 || s.Retried != 1 {
				t.Errorf("stats %+v: want Unrouted 2, Retried 1", s)
			}

			// A binding whose unrouted deliveries are acked and observed.
			obs := &unroutedObs{}
			c2, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet, Observer: obs})
			testenv.Must(t, err, "New")
			testenv.Must(t, c2.Bind(consumer.BindingConfig{Binding: b.binding("shipments"), Unrouted: consumer.UnroutedAck}), "bind")
			testenv.Must(t, c2.HandleInbox(consumer.HandlerConfig{Name: "shipments.v1", Binding: b.binding("shipments"),
				Route: consumer.Route{Version: "1"}}, insert("shipments.v1")), "register")
			testenv.Must(t, c2.Start(ctx), "start")
			defer func() { _ = c2.Stop(context.Background()) }()
			s1, s9 := testenv.Name("s1"), testenv.Name("s9")
			if errs := b.pub.Publish(ctx, []txbox.Message{
				{ID: s1, Topic: b.topic("shipments"), Payload: []byte(`{}`), Headers: map[string]string{consumer.DefaultVersionHeader: "1"}},
				{ID: s9, Topic: b.topic("shipments"), Payload: []byte(`{}`), Headers: map[string]string{consumer.DefaultVersionHeader: "9"}},
			}); errs != nil {
				t.Fatalf("publish: %v", errs)
			}
			eventually(t, "shipments settled", func() bool { s := c2.Stats(); return s.Handled == 1 && s.Unrouted == 1 })
			if s := c2.Stats(); s.DeadLettered != 0 {
				t.Errorf("stats %+v: an acked unrouted message was dead-lettered", s)
			}
			if n := d.count(t, "SELECT count(*) FROM "+effects+" WHERE handler = 'shipments.v1' AND id = $1", s1); n != 1 {
				t.Errorf("shipments.v1 applied %s %d times, want 1", s1, n)
			}
			if got := obs.get(); got != b.binding("shipments")+" acked" {
				t.Errorf("observer saw %q, want the shipments binding acked once", got)
			}
			if n := len(b.deadLetters(t, "shipments")); n != 0 {
				t.Errorf("%d dead letters on shipments, want 0", n)
			}
		})
	}
}

func sorted(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// unroutedObs records the Unrouted calls.
type unroutedObs struct {
	txbox.BaseConsumerObserver
	mu    sync.Mutex
	calls []string
}

func (o *unroutedObs) Unrouted(binding string, dead bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	what := " acked"
	if dead {
		what = " dead-lettered"
	}
	o.calls = append(o.calls, binding+what)
}

func (o *unroutedObs) get() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.calls, ", ")
}

// Startup validation of routes: two routes claiming one kind, routes that
// leave deliveries unclaimed with no policy, a declared binding with no
// handler, a malformed route, a reserved version header, and an inbox
// route on a consumer without a database — all listed at once.
func TestRouteValidation(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "nats")
	d := pgxDB(t, 4)
	d.migrateAll(t)
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet, VersionHeader: "Txbox-Version"})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "a", Binding: b.binding("orders"), Route: consumer.Route{Version: "1"}}, noopTx), "register")
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "b", Binding: b.binding("orders"), Route: consumer.Route{Version: "1"}}, noop), "register")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "c", Binding: b.binding("shipments"), Route: consumer.Route{ContentType: "json"}}, noopTx), "register")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "d", Binding: b.binding("shipments")}, noopTx), "register")
	testenv.Must(t, c.Bind(consumer.BindingConfig{Binding: b.binding("events")}), "bind")
	expect(t, startupProblems(t, c),
		`binding "`+b.binding("orders")+`": handlers "a" and "b" all claim route {version=1}`,
		`binding "`+b.binding("orders")+`": its routes {version=1} leave other messages unclaimed and no policy is set`,
		`handler "c": Route {content-type=json}: ContentType "json" is not a media type`,
		`binding "`+b.binding("events")+`" is declared (Bind) but no handler is registered on it`,
		`Config.VersionHeader "Txbox-Version" cannot be a producer's header`,
	)

	// A policy, distinct routes and a catch-all: sound.
	c, err = consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.Bind(consumer.BindingConfig{Binding: b.binding("orders"), Unrouted: consumer.UnroutedDeadLetter}), "bind")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "a", Binding: b.binding("orders"), Route: consumer.Route{Version: "1"}}, noopTx), "register")
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "b", Binding: b.binding("orders"), Route: consumer.Route{Version: "2"}}, noop), "register")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "c", Binding: b.binding("shipments"), Route: consumer.Route{ContentType: "application/json"}}, noopTx), "register")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "d", Binding: b.binding("shipments")}, noopTx), "register")
	testenv.Must(t, c.Validate(context.Background()), "validate a sound routed consumer")

	// An inbox route, and no database.
	c, err = consumer.New[pgx.Tx](nil, consumer.Config{Broker: b.sub, Logger: quiet, Unrouted: consumer.UnroutedAck})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "a", Binding: b.binding("orders"), Route: consumer.Route{Version: "1"}}, noop), "register")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "b", Binding: b.binding("orders"), Route: consumer.Route{Version: "2"}}, noopTx), "register")
	err = c.Validate(context.Background())
	var se *consumer.StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Validate: %v, want a StartupError", err)
	}
	expect(t, se.Problems, `handler "b" has the inbox guarantee but the consumer has no database`)
}

// Routes by topic on a JetStream durable that reads several subjects: a
// topic route, a topic-and-version route that beats it, and a catch-all
// for the rest.
func TestRoutesByTopic(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := testenv.Subject()
	stream := strconvName(testenv.Name("RT"))
	js, _ := jetstream.New(nc)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>", prefix + "dlq.>"}})
	testenv.Must(t, err, "stream")
	_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "all", FilterSubjects: []string{prefix + "ev.>"}})
	testenv.Must(t, err, "consumer")
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	binding := natsjs.Binding(stream, "all")

	c, err := consumer.New[pgx.Tx](nil, consumer.Config{Broker: sub, Logger: quiet})
	testenv.Must(t, err, "New")
	var mu sync.Mutex
	got := map[string][]string{} // handler → message ids
	record := func(name string) func(context.Context, consumer.Message) error {
		return func(_ context.Context, m consumer.Message) error {
			mu.Lock()
			got[name] = append(got[name], m.ID)
			mu.Unlock()
			return nil
		}
	}
	for _, h := range []consumer.HandlerConfig{
		{Name: "a", Route: consumer.Route{Topic: prefix + "ev.a"}},
		{Name: "b2", Route: consumer.Route{Topic: prefix + "ev.b", Version: "2"}},
		{Name: "b", Route: consumer.Route{Topic: prefix + "ev.b"}},
		{Name: "rest"},
	} {
		h.Binding = binding
		testenv.Must(t, c.HandleAtLeastOnce(h, record(h.Name)), "register %s", h.Name)
	}
	testenv.Must(t, c.Start(ctx), "start")
	defer func() { _ = c.Stop(context.Background()) }()
	v := func(s string) map[string]string { return map[string]string{consumer.DefaultVersionHeader: s} }
	if errs := pub.Publish(ctx, []txbox.Message{
		{ID: "a1", Topic: "ev.a", Payload: []byte("x"), Headers: v("2")},
		{ID: "b1", Topic: "ev.b", Payload: []byte("x"), Headers: v("1")},
		{ID: "b2", Topic: "ev.b", Payload: []byte("x"), Headers: v("2")},
		{ID: "b3", Topic: "ev.b", Payload: []byte("x")},
		{ID: "c1", Topic: "ev.c", Payload: []byte("x"), Headers: v("2")},
	}); errs != nil {
		t.Fatalf("publish: %v", errs)
	}
	eventually(t, "all handled", func() bool { return c.Stats().Handled == 5 })
	mu.Lock()
	defer mu.Unlock()
	for _, l := range got {
		sort.Strings(l)
	}
	if fmt.Sprint(got) != "map[a:[a1] b:[b1 b3] b2:[b2] rest:[c1]]" {
		t.Errorf("routed %v", got)
	}
	if s := c.Stats(); s.Unrouted != 0 {
		t.Errorf("stats %+v: nothing is unrouted with a catch-all", s)
	}
}
