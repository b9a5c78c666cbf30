package demo

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

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// demo is one run of txbox demo; runDemo calls its phases in order and
// close at the end.
type demo struct {
	f      demoFlags
	out    io.Writer
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger
	dir    string
	undo   []func() error // run by close, last first

	db     *sql.DB
	drv    *txboxsql.Driver
	ob     *txbox.Outbox[*sql.Tx]
	nc     *nats.Conn
	stream jetstream.Stream
	ship   *shipping

	// The mailer: a JetStream consumer counting distinct order ids.
	mu       sync.Mutex
	seen     map[int64]bool
	received atomic.Int64
	badMsgs  atomic.Int64

	pub             *natsjs.Publisher
	cur             atomic.Pointer[relay.Relay]
	publishedBefore int64 // by relays stopped earlier

	next, committed, rolledBack atomic.Int64
	firstErr                    error
	errOnce                     sync.Once
	started                     time.Time
	ticker                      *time.Ticker
}

func (f demoFlags) validate() error {
	for _, err := range []error{
		demoOrdersSetting.validate(f.orders), demoProducersSetting.validate(f.producers),
		demoRollbackSetting.validate(f.rollbackEvery),
		demoTimeoutSetting.validate(f.timeout), demoProgressSetting.validate(f.progress),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// onClose registers fn for close.
func (d *demo) onClose(fn func() error) { d.undo = append(d.undo, fn) }

// close undoes the setup, last first, and returns the first error.
func (d *demo) close() error {
	var first error
	for i := len(d.undo) - 1; i >= 0; i-- {
		if err := d.undo[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// prepare makes the directory, the context and the logger.
func (d *demo) prepare(ctx context.Context, errOut io.Writer) error {
	d.dir = d.f.dir
	if d.dir == "" {
		dir, err := os.MkdirTemp("", "txbox-demo-")
		if err != nil {
			return err
		}
		d.dir = dir
		d.onClose(func() error { os.RemoveAll(dir); return nil })
	} else {
		if entries, err := os.ReadDir(d.dir); err == nil && len(entries) > 0 {
			return fmt.Errorf("--dir %s is not empty: the demo needs a fresh directory", d.dir)
		}
		if err := os.MkdirAll(d.dir, 0o755); err != nil {
			return err
		}
	}
	d.ctx, d.cancel = context.WithCancel(ctx)
	d.onClose(func() error { d.cancel(); return nil })
	d.log = slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rollbacks := "none rolled back"
	if d.f.rollbackEvery > 0 {
		rollbacks = fmt.Sprintf("every %s transaction rolled back", ordinal(d.f.rollbackEvery))
	}
	fmt.Fprintf(d.out, "txbox demo in %s: %d orders from %d producers, %s\n", d.dir, d.f.orders, d.f.producers, rollbacks)
	return nil
}

// openDatabase opens the shop's database: SQLite, with txbox's outbox and
// inbox tables, an orders table and the shipping service's table.
func (d *demo) openDatabase() (err error) {
	if d.db, err = sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(d.dir, "shop.db"))); err != nil {
		return err
	}
	d.onClose(func() error { d.db.Close(); return nil })
	d.drv = txboxsql.New(d.db, txboxdriver.SQLite)
	m, err := txboxmigrate.New[*sql.Tx](d.drv, txboxmigrate.Config{InboxTables: []string{consumer.DefaultInboxTable}})
	if err != nil {
		return err
	}
	if _, err := m.Up(d.ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := d.db.ExecContext(d.ctx, `CREATE TABLE orders (
		id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount_cents INTEGER NOT NULL, placed_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	// No unique constraint, so that an order shipped twice would show as
	// two rows.
	if _, err := d.db.ExecContext(d.ctx, `CREATE TABLE shipments (order_id INTEGER NOT NULL, created_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create shipments table: %w", err)
	}
	d.ob, err = txbox.New[*sql.Tx](d.drv, txbox.Config{})
	return err
}

// startBroker starts an embedded NATS server with a stream for the shop's
// events and one for dead letters.
func (d *demo) startBroker() error {
	srv, err := natsembed.Start(natsembed.Config{Dir: filepath.Join(d.dir, "nats"), Port: 0})
	if err != nil {
		return err
	}
	d.onClose(func() error { srv.Shutdown(); return nil })
	if d.nc, err = srv.Connect(); err != nil {
		return err
	}
	d.onClose(func() error { d.nc.Close(); return nil })
	fmt.Fprintf(d.out, "embedded NATS server on %s, SQLite database %s\n", srv.ClientURL(), filepath.Join(d.dir, "shop.db"))
	if d.stream, err = natsjs.EnsureStream(d.ctx, d.nc, natsjs.StreamConfig{Name: "SHOP", Subjects: []string{"order.>", "shipment.>"}}); err != nil {
		return err
	}
	_, err = natsjs.EnsureStream(d.ctx, d.nc, natsjs.StreamConfig{Name: "SHOP_DLQ", Subjects: []string{natsjs.DefaultDeadLetterPrefix + ">"}})
	return err
}

// startMailer starts the subscriber: a JetStream consumer counting
// distinct order ids.
func (d *demo) startMailer() error {
	d.seen = map[int64]bool{}
	cons, err := d.stream.CreateOrUpdateConsumer(d.ctx, jetstream.ConsumerConfig{Durable: "mailer", FilterSubject: "order.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		d.received.Add(1)
		var ev orderPlaced
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.OrderID == 0 {
			d.badMsgs.Add(1)
		} else {
			d.mu.Lock()
			d.seen[ev.OrderID] = true
			d.mu.Unlock()
		}
		_ = msg.Ack()
	})
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	d.onClose(func() error { cc.Stop(); return nil })
	return nil
}

// delivered is how many distinct orders' events the mailer received.
func (d *demo) delivered() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int64(len(d.seen))
}

// startShipping starts the shipping service: an inbox handler that writes a
// shipment row and emits shipment.created in the same transaction, exactly
// once per order.
func (d *demo) startShipping() (err error) {
	if d.ship, err = startShipping(d.ctx, d.nc, d.drv, d.ob, d.log); err != nil {
		return err
	}
	d.onClose(func() error {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(d.ctx), 10*time.Second)
		defer scancel()
		_ = d.ship.c.Stop(sctx)
		return nil
	})
	return nil
}

// startFirstRelay starts the relay, which close stops.
func (d *demo) startFirstRelay() (err error) {
	if d.pub, err = natsjs.NewPublisher(d.nc, natsjs.PublisherConfig{}); err != nil {
		return err
	}
	if err := d.startRelay(); err != nil {
		return err
	}
	d.onClose(func() error { _, err := d.stopRelay(); return err })
	return nil
}

// startRelay starts a relay, fast: a short poll interval, and Wake after
// each commit.
func (d *demo) startRelay() error {
	r, err := relay.New[*sql.Tx](d.drv, d.pub, relay.Config{PollInterval: 50 * time.Millisecond, Logger: d.log})
	if err != nil {
		return err
	}
	if err := r.Start(d.ctx); err != nil {
		return err
	}
	d.cur.Store(r)
	return nil
}

func (d *demo) stopRelay() (relay.Stats, error) {
	r := d.cur.Load()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(d.ctx), 30*time.Second)
	defer scancel()
	if err := r.Stop(sctx); err != nil {
		return relay.Stats{}, fmt.Errorf("stop relay: %w", err)
	}
	return r.Stats(sctx)
}

// fail records the run's first error and cancels it.
func (d *demo) fail(err error) {
	d.errOnce.Do(func() { d.firstErr = err; d.cancel() })
}

// produce places the orders from concurrent producers, restarting the relay
// once halfway, and prints progress until all are placed.
func (d *demo) produce() error {
	restartAt := max(int64(d.f.orders)/2, 1)
	restart := make(chan struct{})
	restartDone := make(chan struct{})
	d.started = time.Now()
	go d.restartRelay(restart, restartDone)
	var wg sync.WaitGroup
	for p := 0; p < d.f.producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.producer(restartAt, restart)
		}()
	}
	d.ticker = time.NewTicker(d.f.progress)
	d.onClose(func() error { d.ticker.Stop(); return nil })
	producersDone := make(chan struct{})
	go func() { wg.Wait(); close(producersDone) }()
wait:
	for {
		select {
		case <-producersDone:
			break wait
		case <-d.ticker.C:
			d.progress()
		}
	}
	<-restartDone
	if d.firstErr != nil {
		return d.firstErr
	}
	if err := d.ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "all %d orders placed in %s (%d committed, %d rolled back); waiting for delivery\n",
		d.f.orders, time.Since(d.started).Round(time.Millisecond), d.committed.Load(), d.rolledBack.Load())
	return nil
}

// producer places orders until all are taken, and closes restart after
// placing order restartAt.
func (d *demo) producer(restartAt int64, restart chan struct{}) {
	for d.ctx.Err() == nil {
		n := d.next.Add(1)
		if n > int64(d.f.orders) {
			return
		}
		rollback := d.f.rollbackEvery > 0 && n%int64(d.f.rollbackEvery) == 0
		if err := placeOrder(d.ctx, d.db, d.ob, n, rollback); err != nil {
			if d.ctx.Err() == nil {
				d.fail(fmt.Errorf("order %d: %w", n, err))
			}
			return
		}
		if rollback {
			d.rolledBack.Add(1)
		} else {
			d.committed.Add(1)
			d.cur.Load().Wake()
		}
		if n == restartAt {
			close(restart)
		}
	}
}

// restartRelay stops the relay once restart is closed, and starts a new one.
func (d *demo) restartRelay(restart <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	select {
	case <-restart:
	case <-d.ctx.Done():
		return
	}
	// Stop it once it has delivered something, so that the new relay
	// really picks up in the middle (the producers keep SQLite's one
	// write lock busy; the relay may need a moment to get it).
	published := func() int64 { st, _ := d.cur.Load().Stats(d.ctx); return st.Published }
	for i := 0; i < 200 && published() == 0 && d.ctx.Err() == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	st, err := d.stopRelay()
	if err != nil {
		d.fail(err)
		return
	}
	d.publishedBefore = st.Published
	fmt.Fprintf(d.out, "relay stopped mid-run after publishing %d events; orders keep coming in\n", st.Published)
	select {
	case <-time.After(300 * time.Millisecond):
	case <-d.ctx.Done():
		return
	}
	if err := d.startRelay(); err != nil {
		d.fail(err)
		return
	}
	fmt.Fprintf(d.out, "relay restarted: a new relay picks up where the old one stopped\n")
}

func (d *demo) progress() {
	fmt.Fprintf(d.out, "progress: orders committed %d, rolled back %d; events delivered %d\n", d.committed.Load(), d.rolledBack.Load(), d.delivered())
}

// awaitDelivery waits, bounded, until every committed order's event has
// arrived and the outbox has nothing left to deliver.
func (d *demo) awaitDelivery() error {
	deadline := time.NewTimer(d.f.timeout)
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if d.delivered() >= d.committed.Load() && d.ship.events() >= d.committed.Load() {
			st, err := d.cur.Load().Stats(d.ctx)
			if err != nil {
				return err
			}
			if st.Pending == 0 {
				break
			}
		}
		select {
		case <-poll.C:
		case <-d.ticker.C:
			d.progress()
		case <-deadline.C:
			d.progress()
			return fmt.Errorf("delivery did not finish within --timeout %s: %d of %d committed orders' events arrived", d.f.timeout, d.delivered(), d.committed.Load())
		case <-d.ctx.Done():
			return d.ctx.Err()
		}
	}
	time.Sleep(100 * time.Millisecond) // let stray copies arrive before counting
	d.progress()
	return nil
}

// verdict checks the deliveries against the database's own record of the
// orders and prints the result.
func (d *demo) verdict() error {
	orders, err := d.orderIDs()
	if err != nil {
		return err
	}
	lost, phantom, nSeen := d.compare(orders)
	st, err := d.cur.Load().Stats(d.ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "relays published %d events in all; the consumer received %d messages, %d of them duplicates; %s in all\n",
		d.publishedBefore+st.Published, d.received.Load(), d.received.Load()-nSeen, time.Since(d.started).Round(time.Millisecond))
	shipments, shipped, err := countShipments(d.ctx, d.db)
	if err != nil {
		return err
	}
	cst := d.ship.c.Stats()
	fmt.Fprintf(d.out, "shipping (inbox handler): shipments %d for %d orders, applied twice %d; %d redeliveries recognised as duplicates; shipment.created delivered %d\n",
		shipped, len(orders), shipments-shipped, cst.Duplicates, d.ship.events())
	fmt.Fprintf(d.out, "orders committed %d, events delivered %d, lost %d, phantom %d, applied twice %d\n", len(orders), nSeen, lost, phantom, shipments-shipped)
	if int64(len(orders)) != d.committed.Load() {
		return fmt.Errorf("the orders table has %d orders but %d transactions committed", len(orders), d.committed.Load())
	}
	if lost != 0 || phantom != 0 {
		return errors.New("the outbox broke its promise: lost or phantom events")
	}
	if shipments != shipped || shipped != int64(len(orders)) {
		return fmt.Errorf("the inbox broke its promise: %d shipment rows for %d distinct orders shipped, %d orders", shipments, shipped, len(orders))
	}
	return nil
}

// orderIDs returns the ids in the orders table.
func (d *demo) orderIDs() (map[int64]bool, error) {
	orders := map[int64]bool{}
	rows, err := d.db.QueryContext(d.ctx, `SELECT id FROM orders`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		orders[id] = true
	}
	return orders, rows.Err()
}

// compare counts the committed orders the mailer did not receive (lost),
// the events it received of no such order or unreadable (phantom), and the
// distinct orders it received.
func (d *demo) compare(orders map[int64]bool) (lost, phantom, nSeen int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range orders {
		if !d.seen[id] {
			lost++
		}
	}
	for id := range d.seen {
		if !orders[id] {
			phantom++
		}
	}
	return lost, phantom + d.badMsgs.Load(), int64(len(d.seen))
}
