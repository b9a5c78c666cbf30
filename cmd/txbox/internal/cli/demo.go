package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxsql"
)

type demoFlags struct {
	dir           string
	orders        int
	producers     int
	rollbackEvery int
	timeout       time.Duration
	progress      time.Duration
}

func newDemoCmd() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch the outbox deliver every committed order once and no rolled-back one, with no setup",
		Long: `Run a small shop end to end with no services: an SQLite file and an embedded
NATS server with JetStream, in a temporary directory (or --dir).

Several producers place orders. Each order row and its order.placed event
(payload {"order_id": …}, key = customer id) are written in one transaction;
every --rollback-every-th transaction is rolled back on purpose after the event
was added, so a leak would show. A relay delivers the events to a JetStream
stream; halfway through it is stopped and a new one started. A JetStream
consumer counts the distinct order ids it receives. A shipping service
consumes order.placed through an inbox handler (package consumer): in one
transaction it records the message, writes a shipment row and adds
shipment.created to the outbox, which the relay delivers too.

The last line is the verdict:

  orders committed N, events delivered N, lost 0, phantom 0, applied twice 0

where lost counts committed orders with no event, phantom counts events of
orders that were rolled back or do not exist, and applied twice counts orders
the shipping service shipped more than once. The line before it details the
shipping side. The exit
code is non-zero if any of these is not 0, or if delivery does not finish
within --timeout.`,
		Example: `  txbox demo
  txbox demo --orders 20000 --producers 8 --dir /tmp/shop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.dir, "dir", "", "directory for the SQLite file and NATS data; must be empty or absent, and is kept (default: a temporary directory, removed at the end)")
	fs.IntVar(&f.orders, "orders", 2000, "how many orders to place")
	fs.IntVar(&f.producers, "producers", 4, "how many goroutines place orders concurrently")
	fs.IntVar(&f.rollbackEvery, "rollback-every", 7, "roll back every n-th order's transaction after adding its event; 0 never")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "how long to wait, once all orders are placed, for every event to arrive")
	fs.DurationVar(&f.progress, "progress", 500*time.Millisecond, "how often to print a progress line")
	return cmd
}

// orderPlaced is the demo's event payload.
type orderPlaced struct {
	OrderID     int64  `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

func runDemo(ctx context.Context, out, errOut io.Writer, f demoFlags) (err error) {
	switch {
	case f.orders <= 0:
		return fmt.Errorf("--orders %d: must be positive", f.orders)
	case f.producers <= 0:
		return fmt.Errorf("--producers %d: must be positive", f.producers)
	case f.rollbackEvery < 0:
		return fmt.Errorf("--rollback-every %d: must not be negative", f.rollbackEvery)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout %s: must be positive", f.timeout)
	case f.progress <= 0:
		return fmt.Errorf("--progress %s: must be positive", f.progress)
	}
	dir := f.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "txbox-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return fmt.Errorf("--dir %s is not empty: the demo needs a fresh directory", dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rollbacks := "none rolled back"
	if f.rollbackEvery > 0 {
		rollbacks = fmt.Sprintf("every %s transaction rolled back", ordinal(f.rollbackEvery))
	}
	fmt.Fprintf(out, "txbox demo in %s: %d orders from %d producers, %s\n", dir, f.orders, f.producers, rollbacks)

	// The shop's database: SQLite, with txbox's outbox table and an orders table.
	db, err := sql.Open("sqlite", SQLiteDSN(filepath.Join(dir, "shop.db")))
	if err != nil {
		return err
	}
	defer db.Close()
	drv := txboxsql.New(db, driver.SQLite)
	m, err := migrate.New[*sql.Tx](drv, migrate.Config{InboxTables: []string{consumer.DefaultInboxTable}})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (
		id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount_cents INTEGER NOT NULL, placed_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	// The shipping service's table: no unique constraint, so that an order
	// shipped twice would show as two rows.
	if _, err := db.ExecContext(ctx, `CREATE TABLE shipments (order_id INTEGER NOT NULL, created_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create shipments table: %w", err)
	}
	ob, err := txbox.New[*sql.Tx](drv, txbox.Config{})
	if err != nil {
		return err
	}

	// The broker: an embedded NATS server with a stream for the shop's events.
	srv, err := natsembed.Start(natsembed.Config{Dir: filepath.Join(dir, "nats"), Port: 0})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	fmt.Fprintf(out, "embedded NATS server on %s, SQLite database %s\n", srv.ClientURL(), filepath.Join(dir, "shop.db"))
	stream, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: "SHOP", Subjects: []string{"order.>", "shipment.>"}})
	if err != nil {
		return err
	}
	if _, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: "SHOP_DLQ", Subjects: []string{natsjs.DefaultDeadLetterPrefix + ">"}}); err != nil {
		return err
	}

	// The subscriber: a JetStream consumer counting distinct order ids.
	var (
		mu       sync.Mutex
		seen     = map[int64]bool{}
		received atomic.Int64
		badMsgs  atomic.Int64
	)
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "mailer", FilterSubject: "order.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		received.Add(1)
		var ev orderPlaced
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.OrderID == 0 {
			badMsgs.Add(1)
		} else {
			mu.Lock()
			seen[ev.OrderID] = true
			mu.Unlock()
		}
		_ = msg.Ack()
	})
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer cc.Stop()
	delivered := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(seen))
	}

	// The shipping service: an inbox handler that writes a shipment row and
	// emits shipment.created in the same transaction, exactly once per order.
	ship, err := startShipping(ctx, nc, drv, ob, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		_ = ship.c.Stop(sctx)
	}()

	// The relay, fast: a short poll interval, and Wake after each commit.
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	if err != nil {
		return err
	}
	rcfg := relay.Config{PollInterval: 50 * time.Millisecond, Logger: log}
	var cur atomic.Pointer[relay.Relay]
	var publishedBefore int64 // by relays stopped earlier
	startRelay := func() error {
		r, err := relay.New[*sql.Tx](drv, pub, rcfg)
		if err != nil {
			return err
		}
		if err := r.Start(ctx); err != nil {
			return err
		}
		cur.Store(r)
		return nil
	}
	stopRelay := func() (relay.Stats, error) {
		r := cur.Load()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer scancel()
		if err := r.Stop(sctx); err != nil {
			return relay.Stats{}, fmt.Errorf("stop relay: %w", err)
		}
		return r.Stats(sctx)
	}
	if err := startRelay(); err != nil {
		return err
	}
	defer func() {
		if _, serr := stopRelay(); serr != nil && err == nil {
			err = serr
		}
	}()

	// The producers.
	var (
		next, committed, rolledBack atomic.Int64
		wg                          sync.WaitGroup
		firstErr                    error
		errOnce                     sync.Once
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	restartAt := max(int64(f.orders)/2, 1)
	restart := make(chan struct{})
	restartDone := make(chan struct{})
	started := time.Now()
	go func() { // stop the relay once mid-run, and start a new one
		defer close(restartDone)
		select {
		case <-restart:
		case <-ctx.Done():
			return
		}
		// Stop it once it has delivered something, so that the new relay
		// really picks up in the middle (the producers keep SQLite's one
		// write lock busy; the relay may need a moment to get it).
		for i := 0; i < 200 && cur.Load().Counters().Published == 0 && ctx.Err() == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		st, err := stopRelay()
		if err != nil {
			fail(err)
			return
		}
		publishedBefore = st.Published
		fmt.Fprintf(out, "relay stopped mid-run after publishing %d events; orders keep coming in\n", st.Published)
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		if err := startRelay(); err != nil {
			fail(err)
			return
		}
		fmt.Fprintf(out, "relay restarted: a new relay picks up where the old one stopped\n")
	}()
	for p := 0; p < f.producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := next.Add(1)
				if n > int64(f.orders) {
					return
				}
				rollback := f.rollbackEvery > 0 && n%int64(f.rollbackEvery) == 0
				if err := placeOrder(ctx, db, ob, n, rollback); err != nil {
					fail(fmt.Errorf("order %d: %w", n, err))
					return
				}
				if rollback {
					rolledBack.Add(1)
				} else {
					committed.Add(1)
					cur.Load().Wake()
				}
				if n == restartAt {
					close(restart)
				}
			}
		}()
	}
	progress := func() {
		fmt.Fprintf(out, "progress: orders committed %d, rolled back %d; events delivered %d\n", committed.Load(), rolledBack.Load(), delivered())
	}
	ticker := time.NewTicker(f.progress)
	defer ticker.Stop()
	producersDone := make(chan struct{})
	go func() { wg.Wait(); close(producersDone) }()
wait:
	for {
		select {
		case <-producersDone:
			break wait
		case <-ticker.C:
			progress()
		}
	}
	<-restartDone
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(out, "all %d orders placed in %s (%d committed, %d rolled back); waiting for delivery\n",
		f.orders, time.Since(started).Round(time.Millisecond), committed.Load(), rolledBack.Load())

	// Wait, bounded, until every committed order's event has arrived and the
	// outbox has nothing left to deliver.
	deadline := time.NewTimer(f.timeout)
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if delivered() >= committed.Load() && ship.events() >= committed.Load() {
			st, err := cur.Load().Stats(ctx)
			if err != nil {
				return err
			}
			if st.Pending == 0 {
				break
			}
		}
		select {
		case <-poll.C:
		case <-ticker.C:
			progress()
		case <-deadline.C:
			progress()
			return fmt.Errorf("delivery did not finish within --timeout %s: %d of %d committed orders' events arrived", f.timeout, delivered(), committed.Load())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	time.Sleep(100 * time.Millisecond) // let stray copies arrive before counting
	progress()

	// The verdict, against the database's own record of the orders.
	orders := map[int64]bool{}
	rows, err := db.QueryContext(ctx, `SELECT id FROM orders`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		orders[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	mu.Lock()
	var lost, phantom int64
	for id := range orders {
		if !seen[id] {
			lost++
		}
	}
	for id := range seen {
		if !orders[id] {
			phantom++
		}
	}
	nSeen := int64(len(seen))
	mu.Unlock()
	phantom += badMsgs.Load()
	st, err := cur.Load().Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "relays published %d events in all; the consumer received %d messages, %d of them duplicates; %s in all\n",
		publishedBefore+st.Published, received.Load(), received.Load()-nSeen, time.Since(started).Round(time.Millisecond))
	shipments, shipped, err := countShipments(ctx, db)
	if err != nil {
		return err
	}
	cst := ship.c.Stats()
	fmt.Fprintf(out, "shipping (inbox handler): shipments %d for %d orders, applied twice %d; %d redeliveries recognised as duplicates; shipment.created delivered %d\n",
		shipped, len(orders), shipments-shipped, cst.Duplicates, ship.events())
	fmt.Fprintf(out, "orders committed %d, events delivered %d, lost %d, phantom %d, applied twice %d\n", len(orders), nSeen, lost, phantom, shipments-shipped)
	if int64(len(orders)) != committed.Load() {
		return fmt.Errorf("the orders table has %d orders but %d transactions committed", len(orders), committed.Load())
	}
	if lost != 0 || phantom != 0 {
		return errors.New("the outbox broke its promise: lost or phantom events")
	}
	if shipments != shipped || shipped != int64(len(orders)) {
		return fmt.Errorf("the inbox broke its promise: %d shipment rows for %d distinct orders shipped, %d orders", shipments, shipped, len(orders))
	}
	return nil
}

// shipping is the demo's consuming service.
type shipping struct {
	c      *consumer.Consumer[*sql.Tx]
	mu     sync.Mutex
	seen   map[int64]bool // order ids of shipment.created events received
	events func() int64
}

// startShipping starts the inbox handler on order.placed (durable JetStream
// consumer "shipping") and a counter of the shipment.created events it emits.
func startShipping(ctx context.Context, nc *nats.Conn, drv *txboxsql.Driver, ob *txbox.Outbox[*sql.Tx], log *slog.Logger) (*shipping, error) {
	if _, err := natsjs.EnsureConsumer(ctx, nc, "SHOP", natsjs.ConsumerConfig{Durable: "shipping", FilterSubjects: []string{"order.placed"}}); err != nil {
		return nil, err
	}
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{})
	if err != nil {
		return nil, err
	}
	c, err := consumer.New[*sql.Tx](drv, consumer.Config{Broker: sub, Logger: log})
	if err != nil {
		return nil, err
	}
	err = c.HandleInbox(consumer.HandlerConfig{Name: "shipping.order-placed", Binding: natsjs.Binding("SHOP", "shipping")},
		func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
			var ev orderPlaced
			if err := json.Unmarshal(msg.Payload, &ev); err != nil || ev.OrderID == 0 {
				return consumer.Permanent(fmt.Errorf("bad order.placed payload %q", msg.Payload))
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id, created_at) VALUES (?, ?)`,
				ev.OrderID, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
				return err
			}
			payload, _ := json.Marshal(map[string]int64{"order_id": ev.OrderID})
			return ob.Add(ctx, tx, txbox.Message{Topic: "shipment.created", Key: ev.Customer, Payload: payload,
				Headers: map[string]string{"Content-Type": "application/json"}})
		})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	s := &shipping{c: c, seen: map[int64]bool{}}
	s.events = func() int64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return int64(len(s.seen))
	}
	js, err := jetstream.New(nc)
	if err == nil {
		var cons jetstream.Consumer
		cons, err = js.CreateOrUpdateConsumer(ctx, "SHOP", jetstream.ConsumerConfig{Durable: "tracking", FilterSubject: "shipment.>", AckPolicy: jetstream.AckExplicitPolicy})
		if err == nil {
			var cc jetstream.ConsumeContext
			cc, err = cons.Consume(func(msg jetstream.Msg) {
				var ev orderPlaced
				if json.Unmarshal(msg.Data(), &ev) == nil && ev.OrderID != 0 {
					s.mu.Lock()
					s.seen[ev.OrderID] = true
					s.mu.Unlock()
				}
				_ = msg.Ack()
			})
			if err == nil {
				go func() { <-c.Stopped(); cc.Stop() }()
			}
		}
	}
	if err != nil {
		_ = c.Stop(ctx)
		return nil, fmt.Errorf("shipment.created consumer: %w", err)
	}
	return s, nil
}

// countShipments returns the shipment rows and the distinct orders shipped.
func countShipments(ctx context.Context, db *sql.DB) (rows, distinct int64, err error) {
	err = db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT order_id) FROM shipments`).Scan(&rows, &distinct)
	return rows, distinct, err
}

// placeOrder writes order n and its event in one transaction, and rolls it
// back instead of committing when rollback is set.
func placeOrder(ctx context.Context, db *sql.DB, ob *txbox.Outbox[*sql.Tx], n int64, rollback bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	ev := orderPlaced{OrderID: n, Customer: fmt.Sprintf("customer-%02d", n%37), AmountCents: 500 + n*7%9500}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, customer, amount_cents, placed_at) VALUES (?, ?, ?, ?)`,
		ev.OrderID, ev.Customer, ev.AmountCents, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return err
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: ev.Customer, Payload: payload,
		Headers: map[string]string{"Content-Type": "application/json"}}); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback()
	}
	return tx.Commit()
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
