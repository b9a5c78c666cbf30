package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// A private PostgreSQL cluster crashes (pg_ctl stop -m immediate) while a
// consumer with default settings works through a backlog, stays down for
// 3 s, and comes back: batched (the default) and Ordered (26 keys). Every
// message is applied exactly once and none is dead-lettered. The test
// prints, for each, how long after the server accepted connections again
// the first message was applied, and how long after it the backlog was
// drained: what an outage costs beyond itself (nothing waits on a backoff
// that grew with the failed deliveries).
func TestDatabaseCrashRecovery(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "batched", true: "ordered"}[ordered], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cl := testenv.PrivatePostgres(t)
			cfg, err := pgxpool.ParseConfig(cl.URL)
			testenv.Must(t, err, "parse")
			cfg.MaxConns = 12
			cfg.ConnConfig.ConnectTimeout = 2 * time.Second
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			testenv.Must(t, err, "pool")
			t.Cleanup(pool.Close)
			d := db[pgx.Tx]{name: "pgx-private", drv: txboxpgx.New(pool)}
			d.migrateAll(t)
			d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
			b := natsBroker(t, testenv.NATS(t), 30*time.Second)
			c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, MaxDeliveries: 2, Logger: quiet})
			testenv.Must(t, err, "consumer.New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders"), Ordered: ordered},
				func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
					time.Sleep(10 * time.Millisecond) // a backlog that outlasts the crash
					_, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID)
					return err
				}), "register")
			const n = 4000
			var msgs []txbox.Message
			for i := range n {
				msgs = append(msgs, txbox.Message{ID: fmt.Sprintf("m-%04d", i), Topic: b.topic("orders"), Key: fmt.Sprintf("k%02d", i%26), Payload: []byte("x")})
			}
			for _, err := range b.pub.Publish(ctx, msgs) {
				testenv.Must(t, err, "publish")
			}
			testenv.Must(t, c.Start(ctx), "start")
			t.Cleanup(func() { _ = c.Stop(context.Background()) })

			// applied counts the applied messages on a connection of its
			// own, -1 while the server is down.
			var mu sync.Mutex
			applied := func() int64 {
				mu.Lock()
				defer mu.Unlock()
				qctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				var k int64
				if err := pool.QueryRow(qctx, "SELECT count(*) FROM applied").Scan(&k); err != nil {
					return -1
				}
				return k
			}
			progressing(t, time.Minute, "a quarter applied", func() (int64, bool, string) {
				k := applied()
				return k, k >= n/4, fmt.Sprintf("%d applied, stats %+v", k, c.Stats())
			})
			cl.Crash()
			time.Sleep(3 * time.Second)
			cl.Start()
			back := time.Now()
			before := applied()
			var first time.Duration
			progressing(t, 2*time.Minute, "every message applied", func() (int64, bool, string) {
				k := applied()
				if first == 0 && k > before {
					first = time.Since(back)
				}
				return k, k == n, fmt.Sprintf("%d of %d applied, stats %+v", k, n, c.Stats())
			})
			drained := time.Since(back)
			st := c.Stats()
			t.Logf("database back → first message applied %v, backlog drained %v (%d applied at restart); stats %+v",
				first.Round(time.Millisecond), drained.Round(time.Millisecond), before, st)
			if got := d.count(t, "SELECT count(*) FROM applied"); got != n {
				t.Fatalf("%d rows for %d messages", got, n)
			}
			if st.DeadLettered != 0 {
				t.Fatalf("stats %+v: dead-lettered because the database crashed", st)
			}
		})
	}
}
