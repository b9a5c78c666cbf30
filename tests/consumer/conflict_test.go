package consumer_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// A real InnoDB deadlock (error 1213) between two Inbox handlers on MariaDB
// or MySQL, each on a binding of its own: one locks row 1 then row 2, the
// other row 2 then row 1, and each waits, in its first run, until the other
// holds its first row. The server rolls one transaction back; the consumer
// runs it again at once, as it does PostgreSQL's 40P01: one conflict
// (Stats.Conflicts), neither a database failure nor a retry (no backoff,
// no redelivery), each message applied once. Unbatched, each handler has
// one message; batched, each has two in one batch transaction, the first
// locking its first row and the second its other one, so that the whole
// batch is rolled back and runs again.
func TestMySQLDeadlockRunsAgainAtOnce(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "unbatched", true: "batched"}[batched], func(t *testing.T) {
			t.Parallel()
			mysqlDeadlock(t, batched)
		})
	}
}

func mysqlDeadlock(t *testing.T, batched bool) {
	ctx := context.Background()
	d := db[*sql.Tx]{name: "mysql", drv: txboxsql.New(testenv.MySQL(t), txboxdriver.MySQL)}
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE locks (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	d.exec(t, "INSERT INTO locks VALUES (1, 0), (2, 0)")
	d.exec(t, "CREATE TABLE applied (id varchar(191) NOT NULL) ENGINE=InnoDB")
	b := natsBroker(t, testenv.NATS(t), 5*time.Second)

	// Each side's messages, in order, and the steps of each: lock a row,
	// then (first run only) say it holds it, or wait until the other side
	// holds its own.
	type step struct {
		lock         int
		signal, wait string
	}
	steps := map[string][]step{
		"a":  {{lock: 1, signal: "a"}, {wait: "b", lock: 2}},
		"b":  {{lock: 2, signal: "b"}, {wait: "a", lock: 1}},
		"a1": {{lock: 1, signal: "a"}},
		"a2": {{wait: "b", lock: 2}},
		"b1": {{lock: 2, signal: "b"}},
		"b2": {{wait: "a", lock: 1}},
	}
	side := map[string][]string{"orders": {"a"}, "shipments": {"b"}}
	size := 1
	if batched {
		side = map[string][]string{"orders": {"a1", "a2"}, "shipments": {"b1", "b2"}}
		size = 4
	}
	var mu sync.Mutex
	held := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	var runs runCounter
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Concurrency: 1, MaxDeliveries: 1,
		BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: quiet,
		Batch: consumer.BatchConfig{Size: size, Wait: 200 * time.Millisecond}})
	testenv.Must(t, err, "New")
	for _, flow := range []string{"orders", "shipments"} {
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: flow, Binding: b.binding(flow)},
			func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
				first := runs.add(msg.ID) == 1
				for _, s := range steps[msg.ID] {
					if first && s.wait != "" {
						select {
						case <-held[s.wait]:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					if _, err := tx.ExecContext(ctx, "UPDATE locks SET v = v + 1 WHERE id = ?", s.lock); err != nil {
						return fmt.Errorf("lock row %d: %w", s.lock, err)
					}
					if first && s.signal != "" {
						mu.Lock()
						close(held[s.signal])
						mu.Unlock()
					}
				}
				_, err := tx.ExecContext(ctx, "INSERT INTO applied (id) VALUES (?)", msg.ID)
				return err
			}), "register %s", flow)
	}
	for flow, ids := range side {
		var msgs []txbox.Message
		for _, id := range ids {
			msgs = append(msgs, txbox.Message{ID: id, Topic: b.topic(flow), Payload: []byte(id)})
		}
		for i, err := range b.pub.Publish(ctx, msgs) {
			testenv.Must(t, err, "publish %s", msgs[i].ID)
		}
	}
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	n := int64(2 * len(side["orders"]))
	eventually(t, "every message handled", func() bool { return c.Stats().Handled == n })
	st := c.Stats()
	t.Logf("batched %t: stats %+v", batched, st)
	if rows := d.count(t, "SELECT count(*) FROM applied"); rows != n {
		t.Fatalf("%d rows for %d messages", rows, n)
	}
	if st.Conflicts != 1 || st.DatabaseFailures != 0 || st.Retried != 0 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v: want the deadlock run again at once (1 conflict), no database failure, retry or dead letter", st)
	}
	if batched && (st.Batches != 2 || st.BatchesFailed != 0) {
		t.Fatalf("stats %+v: want both batches committed as batches, none failed", st)
	}
}
