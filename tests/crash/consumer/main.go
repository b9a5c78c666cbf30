// Command consumer is the crash harness's reader: txbox's consumer runtime
// with one inbox handler that applies each message's effect to
// crash_effects (key, version, message id, time, pid) in the inbox's
// transaction. The handler keeps per-key order itself, as
// docs/guide/consumer.md advises a handler that needs it: a version that is not
// the key's next is refused (retried later), one at or below the key's last
// applied version is applied anyway, so that the harness's ledger sees a
// double effect or an order violation instead of this program hiding it.
//
// With -ordered the handler is Ordered (consumer.HandlerConfig.Ordered)
// and applies every version as it arrives, refusing none: per-key order
// is then the consumer runtime's alone, and the ledger checks it.
//
//	consumer -db URL -nats nats://127.0.0.1:PORT -binding STREAM/durable -dlq PREFIX [-ordered] [-batch N]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/crash/internal/crashdb"
	"github.com/txbox/txbox/txboxsql"
)

// errNotNext is the handler's refusal of a version that is not its key's
// next one.
var errNotNext = errors.New("not the key's next version")

func main() {
	dbURL := flag.String("db", "", "database URL (postgres://… or sqlite:PATH)")
	natsURL := flag.String("nats", "", "NATS server URL")
	binding := flag.String("binding", "", "STREAM/durable")
	dlq := flag.String("dlq", "", "dead-letter subject prefix")
	concurrency := flag.Int("concurrency", 4, "messages handled at once")
	ordered := flag.Bool("ordered", false, "an Ordered handler that applies versions as they arrive")
	batch := flag.Int("batch", 0, "consumer.BatchConfig.Size (0: the default; 1: unbatched)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix(fmt.Sprintf("consumer[%d] ", os.Getpid()))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	db, dialect, err := crashdb.Open(*dbURL)
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(*concurrency + 2)
	nc, err := nats.Connect(*natsURL, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		log.Fatal(err)
	}
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: *dlq})
	if err != nil {
		log.Fatal(err)
	}
	c, err := consumer.New(txboxsql.New(db, dialect), consumer.Config{
		Broker: sub, Concurrency: *concurrency, MaxDeliveries: 1_000_000,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Batch: consumer.BatchConfig{Size: *batch},
		Inbox:  inbox.Config{Hook: func(context.Context, inbox.Event) {}},
		Logger: logger,
	})
	if err != nil {
		log.Fatal(err)
	}
	pid := os.Getpid()
	err = c.HandleInbox(consumer.HandlerConfig{Name: "crash.apply", Binding: *binding, Ordered: *ordered},
		func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
			key, version, err := crashdb.ParseMsgID(string(msg.Payload))
			if err != nil {
				return err
			}
			var last int
			if err := tx.QueryRowContext(ctx, crashdb.Q(dialect, "SELECT coalesce(max(version), 0) FROM crash_effects WHERE key = ?"), key).Scan(&last); err != nil {
				return err
			}
			if version > last+1 && !*ordered {
				return fmt.Errorf("%w: %s after %d", errNotNext, msg.ID, last)
			}
			_, err = tx.ExecContext(ctx, crashdb.Q(dialect, "INSERT INTO crash_effects (key, version, msg_id, applied_us, pid) VALUES (?, ?, ?, ?, ?)"),
				key, version, msg.ID, time.Now().UnixMicro(), pid)
			return err
		})
	if err != nil {
		log.Fatal(err)
	}
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Start(ctx)
		cancel()
		if err == nil {
			break
		}
		log.Printf("start (try %d): %v", try, err)
		time.Sleep(200 * time.Millisecond)
	}
	log.Printf("started")
	for range time.Tick(5 * time.Second) {
		log.Printf("stats %+v", c.Stats())
	}
}
