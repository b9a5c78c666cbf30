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

// Run the relay until SIGINT or SIGTERM: it claims the committed outbox
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
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
