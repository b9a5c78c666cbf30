package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// billingCustomers is how many customers (outbox keys) the billing
// workload spreads its invoices over.
const billingCustomers = 26

// invoice is the billing workload's message.
type invoice struct {
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

// billingRun is one run of the billing workload: a new user's service with
// default settings (batched, Concurrency 8), whose HandleInboxJSON handler
// writes an invoice row and adds "invoice.created" to the outbox, with
// Key: the customer (keyed) or no key. It publishes n invoices on flow,
// consumes them with a new consumer, and returns the time from Start until
// every message was handled, and the consumer's stats. It fails t when
// the flow makes no progress for a minute; stalled, if set, is called at
// every poll with the stats, to stop the run early.
func billingRun(t testing.TB, d db[pgx.Tx], br *broker, flow, prefix string, n int, keyed bool, stalled func(consumer.Stats) string) (time.Duration, consumer.Stats) {
	t.Helper()
	ctx := context.Background()
	ob, err := txbox.New(d.drv, txbox.Config{Table: "billing_outbox"})
	testenv.Must(t, err, "outbox")
	var msgs []txbox.Message
	for i := range n {
		payload := fmt.Sprintf(`{"customer":"c%02d","cents":%d}`, i%billingCustomers, 100+i)
		msgs = append(msgs, txbox.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Topic: br.topic(flow), Payload: []byte(payload)})
		if len(msgs) == 500 || i == n-1 {
			for _, err := range br.pub.Publish(ctx, msgs) {
				testenv.Must(t, err, "publish")
			}
			msgs = nil
		}
	}
	c, err := consumer.New(d.drv, consumer.Config{Broker: br.sub, Logger: quiet})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, consumer.HandleInboxJSON(c, consumer.HandlerConfig{Name: "billing", Binding: br.binding(flow)},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message, inv invoice) error {
			if _, err := tx.Exec(ctx, "INSERT INTO invoices (message_id, customer, cents) VALUES ($1, $2, $3)", msg.ID, inv.Customer, inv.Cents); err != nil {
				return fmt.Errorf("insert invoice: %w", err)
			}
			out := txbox.Message{Topic: "invoice.created", Payload: msg.Payload}
			if keyed {
				out.Key = inv.Customer
			}
			_, err := ob.Add(ctx, tx, out)
			return err
		}), "register")
	start := time.Now()
	testenv.Must(t, c.Start(ctx), "start")
	defer func() { testenv.Must(t, c.Stop(ctx), "stop") }()
	progressing(t, time.Minute, fmt.Sprintf("%d invoices handled", n), func() (int64, bool, string) {
		st := c.Stats()
		if stalled != nil {
			if why := stalled(st); why != "" {
				t.Fatalf("%s (stats %+v)", why, st)
			}
		}
		return st.Handled, st.Handled >= int64(n), fmt.Sprintf("stats %+v", st)
	})
	return time.Since(start), c.Stats()
}

// billingSchema creates the billing workload's tables in d.
func billingSchema(t testing.TB, d db[pgx.Tx]) {
	t.Helper()
	d.migrateAll(t, "billing_outbox")
	d.exec(t, "CREATE TABLE invoices (message_id text PRIMARY KEY, customer text NOT NULL, cents int NOT NULL)")
}

// The billing workload with every default (batched, Concurrency 8): 600
// invoices of 26 customers, each adding an outbox message keyed by its
// customer. Concurrent batches add the same keys; the per-key order lock
// each keyed row takes must not make them deadlock: no database failure,
// no conflict run again, every invoice and outbox message written once,
// each customer's outbox messages in id order of their invoices' arrival
// within a batch.
func TestBillingKeyedAddsNoDeadlock(t *testing.T) {
	t.Parallel()
	d := pgxDB(t, 12)
	billingSchema(t, d)
	br := natsBroker(t, testenv.NATS(t), 30*time.Second)
	const n = 600
	el, st := billingRun(t, d, br, "orders", "inv", n, true, func(st consumer.Stats) string {
		if st.DatabaseFailures != 0 || st.Conflicts != 0 {
			return fmt.Sprintf("%d database failures, %d conflicts: concurrent batches deadlocked on their keys", st.DatabaseFailures, st.Conflicts)
		}
		return ""
	})
	t.Logf("%d invoices in %v; stats %+v", n, el, st)
	if st.DatabaseFailures != 0 || st.Conflicts != 0 || st.Retried != 0 {
		t.Fatalf("stats %+v: want no database failure, conflict or retry", st)
	}
	if got := d.count(t, "SELECT count(*) FROM invoices"); got != n {
		t.Fatalf("%d invoices for %d messages", got, n)
	}
	if got := d.count(t, "SELECT count(*) FROM billing_outbox"); got != n {
		t.Fatalf("%d outbox messages for %d invoices", got, n)
	}
	if got := d.count(t, "SELECT count(DISTINCT ordering_key) FROM billing_outbox"); got != billingCustomers {
		t.Fatalf("%d keys in the outbox, want %d", got, billingCustomers)
	}
}

// BenchmarkBillingKeyed runs the billing workload (3,000 invoices of 26
// customers on JetStream, every consumer default) with the outbox messages
// keyed by customer and without a key, interleaved, 3 repetitions, on a
// private PostgreSQL cluster whose deadlock count (pg_stat_database) is
// the workload's alone, and reports the medians, the keyed/unkeyed ratio
// and the deadlocks of each:
//
//	CI=true go test ./tests/consumer -run '^$' -bench BillingKeyed -benchtime 1x
func BenchmarkBillingKeyed(b *testing.B) {
	ctx := context.Background()
	cl := testenv.PrivatePostgres(b, "fsync=off", "max_connections=50")
	cfg, err := pgxpool.ParseConfig(cl.URL)
	testenv.Must(b, err, "parse")
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	testenv.Must(b, err, "pool")
	b.Cleanup(pool.Close)
	d := db[pgx.Tx]{name: "pgx", drv: txboxpgx.New(pool)}
	billingSchema(b, d)
	br := natsBroker(b, testenv.NATS(b), 30*time.Second)
	deadlocks := func() int64 {
		return d.count(b, "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
	}
	const n, reps = 3000, 3
	rates := map[bool][]float64{}
	dead := map[bool]int64{}
	for rep := range reps {
		for _, keyed := range []bool{true, false} {
			before := deadlocks()
			el, st := billingRun(b, d, br, "orders", fmt.Sprintf("r%d-k%v", rep, keyed), n, keyed, nil)
			time.Sleep(100 * time.Millisecond) // the statistics collector's flush
			dl := deadlocks() - before
			dead[keyed] += dl
			rates[keyed] = append(rates[keyed], float64(n)/el.Seconds())
			b.Logf("rep %d keyed=%v: %d msg in %v (%.0f msg/s), %d deadlocks, %d database failures", rep, keyed, n, el.Round(time.Millisecond), float64(n)/el.Seconds(), dl, st.DatabaseFailures)
		}
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	k, u := med(rates[true]), med(rates[false])
	b.ReportMetric(k, "keyed-msg/s")
	b.ReportMetric(u, "unkeyed-msg/s")
	b.ReportMetric(k/u, "keyed/unkeyed")
	b.ReportMetric(float64(dead[true]), "keyed-deadlocks")
	b.Logf("keyed %v msg/s, unkeyed %v msg/s; medians %.0f / %.0f; keyed/unkeyed %.2f; deadlocks keyed %d, unkeyed %d",
		round(rates[true]), round(rates[false]), k, u, k/u, dead[true], dead[false])
}
