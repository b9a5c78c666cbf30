package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
)

// No two batches of a binding hold one key at once, and a key's messages
// commit in arrival order: 1,200 keyed messages over 6 keys on JetStream,
// every consumer default (batched, Concurrency 8). Each handler run takes
// its key's transaction-level advisory lock with pg_try_advisory_xact_lock,
// which fails while another open transaction — another batch holding a
// message of the key — has it, and records whether it got it; the rows'
// ids (bigserial, drawn as they are inserted) give the key's commit order.
func TestBatchesNeverShareAKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := pgxDB(t, 12)
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE affinity (id bigserial PRIMARY KEY, key text NOT NULL, seq int NOT NULL, locked boolean NOT NULL)")
	br := natsBroker(t, testenv.NATS(t), 30*time.Second)
	const n, keys = 1200, 6
	var msgs []txbox.Message
	for i := range n {
		msgs = append(msgs, txbox.Message{ID: fmt.Sprintf("aff-%d", i), Topic: br.topic("orders"),
			Key: fmt.Sprintf("k%d", i%keys), Payload: []byte(strconv.Itoa(i))})
	}
	for _, err := range br.pub.Publish(ctx, msgs) {
		testenv.Must(t, err, "publish")
	}
	class := 1 + rand.Int32N(1<<30) // this test's advisory lock space
	c, err := consumer.New(d.drv, consumer.Config{Broker: br.sub, Logger: quiet})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "affinity", Binding: br.binding("orders")},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			seq, err := strconv.Atoi(string(msg.Payload))
			if err != nil {
				return consumer.Permanent(err)
			}
			var locked bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1, hashtext($2))", class, msg.Key).Scan(&locked); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO affinity (key, seq, locked) VALUES ($1, $2, $3)", msg.Key, seq, locked)
			return err
		}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	defer func() { testenv.Must(t, c.Stop(ctx), "stop") }()
	progressing(t, time.Minute, fmt.Sprintf("%d messages handled", n), func() (int64, bool, string) {
		st := c.Stats()
		return st.Handled, st.Handled >= n, fmt.Sprintf("stats %+v", st)
	})
	st := c.Stats()
	t.Logf("stats %+v", st)
	if st.Batches == 0 || st.Retried != 0 {
		t.Fatalf("stats %+v: want batches and no retry", st)
	}
	if got := d.count(t, "SELECT count(*) FROM affinity"); got != n {
		t.Fatalf("%d rows for %d messages", got, n)
	}
	if shared := d.count(t, "SELECT count(*) FROM affinity WHERE NOT locked"); shared != 0 {
		t.Fatalf("%d of %d handler runs found their key held by another open batch", shared, n)
	}
	back := d.count(t, `SELECT count(*) FROM (SELECT seq < lag(seq) OVER (PARTITION BY key ORDER BY id) AS back FROM affinity) r WHERE back`)
	if back != 0 {
		t.Fatalf("%d messages committed after a later message of their key", back)
	}
}
