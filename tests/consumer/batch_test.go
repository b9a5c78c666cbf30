package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// mysqlClassified is MySQL with the program's classifier (docs/guide/consumer.md),
// so that a deadlock between two batches is a database failure.
func mysqlClassified(t testing.TB) db[*sql.Tx] {
	return db[*sql.Tx]{name: "mysql", drv: txboxsql.New(testenv.MySQL(t), txboxdriver.MySQL)}
}

// txidExpr is an SQL expression naming the current transaction, "" where
// there is none to read (SQLite).
func txidExpr(d txboxdriver.Dialect) string {
	switch d {
	case txboxdriver.Postgres:
		return "txid_current()::text"
	case txboxdriver.MySQL:
		return "(SELECT CAST(trx_id AS CHAR) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID())"
	}
	return "''"
}

// runCounter counts handler runs per message id.
type runCounter struct {
	mu sync.Mutex
	m  map[string]int
}

func (r *runCounter) add(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]int{}
	}
	r.m[id]++
	return r.m[id]
}

func (r *runCounter) get(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// A handler that returns an error and one that panics, in the middle of a
// batch of 30 on each database: their neighbours commit in ONE transaction
// (the same transaction id on every row, where the database has one to
// read) and once; the two failures leave no row and are retried alone
// until MaxDeliveries (2) dead-letters them, with their errors.
func TestBatchFailingHandlerInTheMiddle(t *testing.T) {
	t.Parallel()
	for _, dbName := range e2eDatabases {
		t.Run(dbName, func(t *testing.T) {
			t.Parallel()
			switch dbName {
			case "pgx":
				batchFailing(t, pgxDB(t, 10))
			case "sqlite":
				batchFailing(t, sqliteDB(t))
			case "mysql":
				batchFailing(t, mysqlClassified(t))
			}
		})
	}
}

func batchFailing[TTx any](t *testing.T, d db[TTx]) {
	ctx := context.Background()
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE applied (id "+d.text()+" NOT NULL, txid "+d.text()+")")
	b := newBroker(t, "rabbitmq")
	all := ids("m", 30)
	all[10], all[20] = "err-1", "panic-1"
	publishAll(t, b, all) // before Start: the one worker takes them all in one batch
	var runs runCounter
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Concurrency: 1, MaxDeliveries: 2,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: quiet,
		Batch: consumer.BatchConfig{Size: len(all), Wait: time.Second}})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders")},
		func(ctx context.Context, tx TTx, msg consumer.Message) error {
			runs.add(msg.ID)
			// The failing ones write first: the rollback to their savepoint
			// must undo it.
			if _, err := d.drv.UnwrapTx(tx).Exec(ctx, "INSERT INTO applied (id, txid) VALUES ("+d.ph(1)+", "+txidExpr(d.drv.Dialect())+")", msg.ID); err != nil {
				return err
			}
			switch msg.ID {
			case "err-1":
				return errors.New("cannot apply err-1")
			case "panic-1":
				panic("boom in panic-1")
			}
			return nil
		}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	eventually(t, "the two failures dead-lettered", func() bool { return len(b.deadLetters(t, "orders")) == 2 })
	eventually(t, "settled", func() bool {
		st := c.Stats()
		return st.Handled == 28 && st.DeadLettered == 2
	})
	st := c.Stats()
	t.Logf("%s: stats %+v", d.name, st)
	if n := d.count(t, "SELECT count(*) FROM applied"); n != 28 {
		t.Fatalf("%d rows, want 28 (the neighbours once each, nothing of the failures)", n)
	}
	if n := d.count(t, "SELECT count(DISTINCT id) FROM applied"); n != 28 {
		t.Fatalf("%d distinct ids applied, want 28", n)
	}
	if d.drv.Dialect() != txboxdriver.SQLite {
		if n := d.count(t, "SELECT count(DISTINCT txid) FROM applied"); n != 1 {
			t.Fatalf("the 28 neighbours committed in %d transactions, want 1", n)
		}
	}
	if st.Batches < 1 || st.BatchesFailed != 0 {
		t.Fatalf("stats %+v: want a committed batch and no batch failure", st)
	}
	for _, id := range all {
		want := 1
		if id == "err-1" || id == "panic-1" {
			want = 2
		}
		if got := runs.get(id); got != want {
			t.Errorf("%s ran %d times, want %d", id, got, want)
		}
	}
	dl := b.deadLetters(t, "orders")
	if !strings.Contains(dl["err-1"][b.errHeader], "cannot apply err-1") || !strings.Contains(dl["panic-1"][b.errHeader], "boom in panic-1") {
		t.Fatalf("dead letters lack their errors: %v", dl)
	}
}

// One message breaks the commit of its transaction, which is the
// message's fault and counts toward MaxDeliveries (2): a deferred foreign
// key to a customer that does not exist, a deferred unique constraint
// clashing with a row already there (both checked only at COMMIT), a
// statement error the handler swallowed (the transaction is left aborted;
// pgx reports its COMMIT as a rollback). Batched (20 messages in one
// batch) and unbatched: the breaking message is dead-lettered after 2
// failures of its own, alone; its 19 neighbours commit once each; no
// failure is a database failure.
func TestCommitFailureCountsAgainstTheMessage(t *testing.T) {
	t.Parallel()
	causes := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error
	}{
		{"deferred foreign key", func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			_, err := tx.Exec(ctx, "INSERT INTO applied (id, customer) VALUES ($1, $2)", msg.ID, map[bool]string{true: "nobody", false: "c1"}[msg.ID == "bad"])
			return err
		}},
		{"deferred unique", func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			_, err := tx.Exec(ctx, "INSERT INTO applied (id, customer) VALUES ($1, 'c1')", map[bool]string{true: "clash", false: msg.ID}[msg.ID == "bad"])
			return err
		}},
		{"swallowed statement error", func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			if msg.ID == "bad" {
				_, _ = tx.Exec(ctx, "INSERT INTO applied (id, customer) VALUES ($1, 'c1')", strings.Repeat("x", 100)) // too long for varchar(64): 22001
				return nil
			}
			_, err := tx.Exec(ctx, "INSERT INTO applied (id, customer) VALUES ($1, 'c1')", msg.ID)
			return err
		}},
	}
	for _, cause := range causes {
		for _, size := range []int{20, 1} {
			t.Run(fmt.Sprintf("%s/batch=%d", cause.name, size), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				d := pgxDB(t, 10)
				d.migrateAll(t)
				d.exec(t, "CREATE TABLE customers (id text PRIMARY KEY)")
				d.exec(t, "INSERT INTO customers (id) VALUES ('c1')")
				d.exec(t, `CREATE TABLE applied (id varchar(64) NOT NULL,
					customer text NOT NULL REFERENCES customers (id) DEFERRABLE INITIALLY DEFERRED,
					CONSTRAINT applied_once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)`)
				d.exec(t, "INSERT INTO applied (id, customer) VALUES ('clash', 'c1')")
				b := newBroker(t, "rabbitmq")
				all := ids("m", 20)
				all[7] = "bad"
				publishAll(t, b, all)
				var runs runCounter
				c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Concurrency: 1, MaxDeliveries: 2,
					BackoffBase: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: quiet,
					Batch: consumer.BatchConfig{Size: size, Wait: time.Second}})
				testenv.Must(t, err, "New")
				testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders")},
					func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
						runs.add(msg.ID)
						return cause.fn(ctx, tx, msg)
					}), "register")
				testenv.Must(t, c.Start(ctx), "start")
				t.Cleanup(func() { _ = c.Stop(context.Background()) })

				progressing(t, 30*time.Second, "the neighbours applied, the bad one dead-lettered", func() (int64, bool, string) {
					st := c.Stats()
					return st.Handled + st.DeadLettered + 1000*st.DatabaseFailures, st.Handled == 19 && st.DeadLettered == 1 || st.DatabaseFailures > 0,
						fmt.Sprintf("stats %+v, bad ran %d times", st, runs.get("bad"))
				})
				st := c.Stats()
				t.Logf("stats %+v; bad ran %d times", st, runs.get("bad"))
				if st.DatabaseFailures != 0 {
					t.Fatalf("stats %+v: a failure of the message's own counted as the database's", st)
				}
				if got := d.count(t, "SELECT count(*) FROM applied WHERE id LIKE 'm%'"); got != 19 {
					t.Fatalf("%d neighbour rows, want 19", got)
				}
				var dl map[string]map[string]string // the count moves before the dead letter is readable
				eventually(t, "the dead letter stored", func() bool { dl = b.deadLetters(t, "orders"); return len(dl) > 0 })
				if len(dl) != 1 || dl["bad"] == nil {
					t.Fatalf("dead letters %v, want bad alone", dl)
				}
				wantRuns := 2 // its own 2 failures
				if size > 1 {
					wantRuns++ // and the batch it broke
				}
				if got := runs.get("bad"); got != wantRuns {
					t.Fatalf("bad ran %d times, want %d", got, wantRuns)
				}
				for i, id := range all {
					// Batched, each neighbour ran in the failed batch, then
					// alone: twice; after a swallowed error the batch stops at
					// the next savepoint, and the later neighbours run alone
					// only.
					want := min(size, 2)
					if cause.name == "swallowed statement error" && i > 7 {
						want = 1
					}
					if id != "bad" && runs.get(id) != want {
						t.Errorf("%s ran %d times, want %d", id, runs.get(id), want)
					}
				}
			})
		}
	}
}

// Concurrent copies of one message never both run, batched: 4 adjacent
// copies of each of 40 messages (RabbitMQ does not dedupe), one worker
// taking them all into one batch (copies in one batch), and 4 workers
// with batches of 8 (copies in concurrent batches, which wait on each
// other's receipts and may deadlock: a deadlock ends as a retry). On
// PostgreSQL and MySQL: each message applied once, every copy settled,
// nothing dead-lettered.
func TestBatchConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	for _, dbName := range []string{"pgx", "mysql"} {
		for _, shape := range []struct {
			name              string
			concurrency, size int
		}{{"one-batch", 1, 160}, {"two-batches", 4, 8}} {
			t.Run(dbName+"/"+shape.name, func(t *testing.T) {
				t.Parallel()
				switch dbName {
				case "pgx":
					batchDuplicates(t, pgxDB(t, 10), shape.concurrency, shape.size)
				case "mysql":
					batchDuplicates(t, mysqlClassified(t), shape.concurrency, shape.size)
				}
			})
		}
	}
}

func batchDuplicates[TTx any](t *testing.T, d db[TTx], concurrency, size int) {
	ctx := context.Background()
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE applied (id "+d.text()+" NOT NULL)")
	b := newBroker(t, "rabbitmq")
	const n, copies = 40, 4
	var all []string
	for _, id := range ids("m", n) {
		for range copies {
			all = append(all, id)
		}
	}
	publishAll(t, b, all)
	var runs runCounter
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Concurrency: concurrency, MaxDeliveries: 2,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: quiet,
		Batch: consumer.BatchConfig{Size: size, Wait: 200 * time.Millisecond}})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders")},
		func(ctx context.Context, tx TTx, msg consumer.Message) error {
			runs.add(msg.ID)
			time.Sleep(time.Millisecond) // widen the overlap of concurrent batches
			_, err := d.drv.UnwrapTx(tx).Exec(ctx, "INSERT INTO applied (id) VALUES ("+d.ph(1)+")", msg.ID)
			return err
		}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	eventually(t, "every copy settled", func() bool {
		st := c.Stats()
		return st.Handled+st.Duplicates == n*copies
	})
	st := c.Stats()
	t.Logf("%s concurrency %d size %d: stats %+v", d.name, concurrency, size, st)
	if rows := d.count(t, "SELECT count(*) FROM applied"); rows != n {
		t.Fatalf("%d rows for %d messages", rows, n)
	}
	if rows := d.count(t, "SELECT count(DISTINCT id) FROM applied"); rows != n {
		t.Fatalf("%d distinct ids for %d messages", rows, n)
	}
	if st.Handled != n || st.DeadLettered != 0 || st.Batches == 0 {
		t.Fatalf("stats %+v: want %d handled, none dead-lettered, batches committed", st, n)
	}
	if concurrency == 1 && st.Duplicates != n*(copies-1) {
		t.Fatalf("stats %+v: want %d duplicates", st, n*(copies-1))
	}
}

// countingDriver is the pgx driver, counting the statements that name the
// given table, on transactions and on the pool.
type countingDriver struct {
	txboxdriver.Driver[pgx.Tx]
	table string
	n     *atomic.Int64
}

func (c countingDriver) UnwrapTx(tx pgx.Tx) txboxdriver.Executor {
	return countingExec{Executor: c.Driver.UnwrapTx(tx), c: c}
}

func (c countingDriver) BeginTx(ctx context.Context) (pgx.Tx, txboxdriver.Tx, error) {
	tx, dtx, err := c.Driver.BeginTx(ctx)
	if err != nil {
		return tx, dtx, err
	}
	return tx, countingTx{Tx: dtx, c: c}, nil
}

func (c countingDriver) count(q string) {
	if strings.Contains(q, c.table) {
		c.n.Add(1)
	}
}

type countingExec struct {
	txboxdriver.Executor
	c countingDriver
}

func (e countingExec) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	e.c.count(q)
	return e.Executor.Exec(ctx, q, args...)
}

func (e countingExec) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	e.c.count(q)
	return e.Executor.Query(ctx, q, args...)
}

type countingTx struct {
	txboxdriver.Tx
	c countingDriver
}

func (e countingTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	e.c.count(q)
	return e.Tx.Exec(ctx, q, args...)
}

func (e countingTx) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	e.c.count(q)
	return e.Tx.Query(ctx, q, args...)
}

// By default the Outbox.Add calls of a batch of 20 cost one INSERT for the
// whole batch (against one per message with Batch.ImmediateAdds), the
// Add of a handler that failed after it is dropped with its savepoint, and
// every other message's outbox row is there exactly once.
func TestBatchDeferredAdds(t *testing.T) {
	t.Parallel()
	for _, immediate := range []bool{false, true} {
		t.Run(fmt.Sprintf("immediate=%v", immediate), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			base := pgxDB(t, 10)
			base.migrateAll(t, "b_outbox")
			base.exec(t, "CREATE TABLE applied (id text NOT NULL)")
			var n atomic.Int64
			d := db[pgx.Tx]{name: "pgx-counting", drv: countingDriver{Driver: base.drv, table: "b_outbox", n: &n}}
			ob, err := txbox.New(d.drv, txbox.Config{Table: "b_outbox"})
			testenv.Must(t, err, "outbox")
			b := newBroker(t, "rabbitmq")
			all := ids("m", 20)
			all[5] = "fails-after-add"
			publishAll(t, b, all)
			c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Concurrency: 1, MaxDeliveries: 1, Logger: quiet,
				Batch: consumer.BatchConfig{Size: len(all), Wait: time.Second, ImmediateAdds: immediate}})
			testenv.Must(t, err, "New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders")},
				func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
					if _, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID); err != nil {
						return err
					}
					if _, err := ob.Add(ctx, tx, txbox.Message{ID: "out-" + msg.ID, Topic: "shipments", Payload: msg.Payload}); err != nil {
						return err
					}
					if msg.ID == "fails-after-add" {
						return consumer.Permanent(errors.New("fails after its Add"))
					}
					return nil
				}), "register")
			testenv.Must(t, c.Start(ctx), "start")
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			eventually(t, "settled", func() bool {
				st := c.Stats()
				return st.Handled == 19 && st.DeadLettered == 1
			})
			st := c.Stats()
			t.Logf("immediate %v: %d outbox statements; stats %+v", immediate, n.Load(), st)
			if st.Batches != 1 {
				t.Fatalf("stats %+v: want the 20 messages in one batch", st)
			}
			if got := base.count(t, "SELECT count(*) FROM b_outbox"); got != 19 {
				t.Fatalf("%d outbox rows, want 19", got)
			}
			if got := base.count(t, "SELECT count(*) FROM b_outbox WHERE message_id = 'out-fails-after-add'"); got != 0 {
				t.Fatal("the failed handler's Add was kept")
			}
			if got := base.count(t, "SELECT count(DISTINCT message_id) FROM b_outbox"); got != 19 {
				t.Fatalf("%d distinct outbox ids, want 19", got)
			}
			want := int64(1) // one for the batch
			if immediate {
				want = 20 // one INSERT per Add
			}
			if n.Load() != want {
				t.Fatalf("%d outbox statements, want %d", n.Load(), want)
			}
		})
	}
}

// With MaxDeliveries 1, a handler in the middle of a batch of 10 terminates
// its own connection (pg_terminate_backend) and returns Outbox.Add's error:
// the batch fails as a whole, its messages run again one by one; nothing is
// dead-lettered, every message and outbox row is applied once, and every
// retry is a database failure.
func TestBatchConnectionKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := pgxDB(t, 10)
	d.migrateAll(t, "b_outbox")
	d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
	b := newBroker(t, "rabbitmq")
	obB, err := txbox.New(d.drv, txbox.Config{Table: "b_outbox"})
	testenv.Must(t, err, "outbox")
	all := ids("m", 10)
	all[4] = "kill"
	publishAll(t, b, all)
	var runs runCounter
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Concurrency: 1, MaxDeliveries: 1,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: quiet,
		Batch: consumer.BatchConfig{Size: len(all), Wait: time.Second}})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "ship", Binding: b.binding("orders")},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			if runs.add(msg.ID) == 1 && msg.ID == "kill" {
				_, _ = tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			}
			if _, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID); err != nil {
				return fmt.Errorf("apply %s: %w", msg.ID, err)
			}
			_, err := obB.Add(ctx, tx, txbox.Message{ID: "ship-" + msg.ID, Topic: "shipments", Payload: msg.Payload})
			return err
		}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	eventually(t, "every message handled", func() bool { return c.Stats().Handled == int64(len(all)) })
	st := c.Stats()
	t.Logf("stats %+v", st)
	if rows := d.count(t, "SELECT count(*) FROM applied"); rows != int64(len(all)) {
		t.Fatalf("%d rows for %d messages", rows, len(all))
	}
	if rows := d.count(t, "SELECT count(DISTINCT message_id) FROM b_outbox"); rows != int64(len(all)) || d.count(t, "SELECT count(*) FROM b_outbox") != rows {
		t.Fatalf("%d distinct outbox rows for %d messages", rows, len(all))
	}
	if st.DeadLettered != 0 || len(b.deadLetters(t, "orders")) != 0 {
		t.Fatalf("dead-lettered on a lost connection: %+v", st)
	}
	if st.BatchesFailed < 1 || st.Retried != st.DatabaseFailures {
		t.Fatalf("stats %+v: want a failed batch, every retry a database failure", st)
	}
}
