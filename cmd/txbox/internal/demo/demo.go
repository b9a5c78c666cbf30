// Package demo is txbox's demo: a small shop on an SQLite file and an
// embedded NATS server, with no setup (see Command). The txbox program runs
// it as "txbox demo"; cmd/txbox/demo runs it alone.
package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	_ "modernc.org/sqlite" // the demo's database engine

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/natsjs"
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

// Bounds of the demo's flags.
var (
	demoOrdersSetting    = setting[int]{flag: "orders", min: 1, max: 1_000_000}
	demoProducersSetting = setting[int]{flag: "producers", min: 1, max: 64}
	demoRollbackSetting  = setting[int]{flag: "rollback-every", min: 1, zero: true}
	demoTimeoutSetting   = setting[time.Duration]{flag: "timeout", min: time.Second, max: 24 * time.Hour}
	demoProgressSetting  = setting[time.Duration]{flag: "progress", min: 10 * time.Millisecond}
)

// setting is the bounds of one of the demo's flags, checked as txbox's
// other commands check theirs.
type setting[T int | time.Duration] struct {
	flag     string
	min, max T    // max 0: no upper bound
	zero     bool // 0 is allowed besides [min, max]
}

func (s setting[T]) validate(v T) error {
	_, isInt := any(v).(int)
	var err error
	switch {
	case v == 0 && s.zero:
	case v < 0 && s.zero:
		err = fmt.Errorf("must be positive, or 0")
	case v <= 0 && isInt:
		err = fmt.Errorf("must be a positive integer")
	case v <= 0:
		err = fmt.Errorf("must be positive")
	case v < s.min:
		err = fmt.Errorf("must be at least %v", s.min)
	case s.max != 0 && v > s.max:
		err = fmt.Errorf("must be at most %v", s.max)
	}
	if err != nil {
		return fmt.Errorf("--%s %v: %w", s.flag, v, err)
	}
	return nil
}

// Command is txbox's demo command: "txbox demo", and the whole of the
// lean demo program (cmd/txbox/demo), which compiles only what the demo
// runs (SQLite and NATS) and none of the CLI's other databases and brokers.
func Command() *cobra.Command {
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

// runDemo runs the demo's phases in order; see Command for what it shows.
func runDemo(ctx context.Context, out, errOut io.Writer, f demoFlags) (err error) {
	if err := f.validate(); err != nil {
		return err
	}
	d := &demo{f: f, out: out}
	defer func() {
		if cerr := d.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := d.prepare(ctx, errOut); err != nil {
		return err
	}
	for _, phase := range []func() error{
		d.openDatabase, d.startBroker, d.startMailer, d.startShipping, d.startFirstRelay,
		d.produce, d.awaitDelivery, d.verdict,
	} {
		if err := phase(); err != nil {
			if ctx.Err() != nil {
				// Interrupted (Ctrl-C): not a failure of the demo.
				fmt.Fprintf(out, "demo interrupted (%v) after %d orders committed and %d rolled back; run it again with a fresh --dir\n",
					context.Cause(ctx), d.committed.Load(), d.rolledBack.Load())
				return nil
			}
			return err
		}
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
			_, err := ob.Add(ctx, tx, txbox.Message{Topic: "shipment.created", Key: ev.Customer, Payload: payload,
				Headers: map[string]string{"Content-Type": "application/json"}})
			return err
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
	if _, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: ev.Customer, Payload: payload,
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
