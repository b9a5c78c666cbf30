package relay_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// Start the relay and stop it at SIGINT or SIGTERM: it claims the committed outbox
// rows, publishes them (here to the in-memory broker of txboxtest; in
// production natsjs, txboxrabbitmq, redisstream, txboxkafka or txboxasynq) and marks
// each one sent once the broker confirmed it. Any number of replicas may
// run against one table.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN("shop.db")) // with modernc.org/sqlite imported
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ob, err := txbox.New(txboxsql.New(db, txboxdriver.SQLite), txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	broker := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	r, err := relay.New(ob, broker, relay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(ctx); err != nil { // checks the table, then relays in the background
		log.Fatal(err)
	}
	select {
	case <-ctx.Done(): // a signal: stop, finishing the batch in flight
		if err := r.Stop(context.Background()); err != nil {
			log.Fatal(err)
		}
	case <-r.Stopped(): // stopped by itself: the publisher is closed for good
		log.Fatal(r.Err())
	}
}

// Stats is the one read of a relay's state: its counters, whether it can
// deliver (Stats.Ready, what a readiness probe serves) and the table's
// backlog.
func ExampleRelay_Stats() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN("shop.db")) // with modernc.org/sqlite imported
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	r, err := relay.New(txboxsql.New(db, txboxdriver.SQLite), txboxtest.NewBroker(txboxtest.BrokerConfig{}), relay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer r.Stop(ctx)

	st, err := r.Stats(ctx)
	if err != nil {
		log.Printf("the table could not be read: %v", err) // the counters are there all the same
	}
	log.Printf("published %d, %d rows pending, oldest %s", st.Published, st.Pending, st.OldestPendingAge)
	if err := st.Ready(); err != nil {
		log.Print(err) // e.g. "txbox relay not ready: no round has succeeded yet"
	}
}
