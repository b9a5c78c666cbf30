package consumer_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the program picks the SQLite engine

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// One binding, two routes by version: version 1 payloads decode into
// OrderV1, version 2 into OrderV2, each in its own inbox handler (its own
// name, one shared inbox table). A payload that does not decode is
// dead-lettered with the decoding error, and a version no route claims is
// dead-lettered too (Config.Unrouted).
func ExampleHandleInboxJSON() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "txbox-consumer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "app.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv := txboxsql.New(db, txboxdriver.SQLite)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{NoOutbox: true, InboxTables: []string{consumer.DefaultInboxTable}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	broker := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	broker.Bind("orders", "orders.placed")
	c, err := consumer.New(drv, consumer.Config{Broker: broker, Unrouted: consumer.UnroutedDeadLetter, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}

	type OrderV1 struct {
		ID     string  `json:"id"`
		Amount float64 `json:"amount"` // in euros
	}
	type OrderV2 struct {
		ID    string `json:"id"`
		Cents int64  `json:"cents"`
	}
	insert := func(ctx context.Context, tx *sql.Tx, id string, cents int64) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO orders (id, cents) VALUES (?, ?)", id, cents)
		return err
	}
	err = consumer.HandleInboxJSON(c, consumer.HandlerConfig{Name: "orders.placed.v1", Binding: "orders", Route: consumer.Route{Version: "1"}},
		func(ctx context.Context, tx *sql.Tx, _ consumer.Message, o OrderV1) error {
			return insert(ctx, tx, o.ID, int64(o.Amount*100))
		})
	if err != nil {
		log.Fatal(err)
	}
	err = consumer.HandleInboxJSON(c, consumer.HandlerConfig{Name: "orders.placed.v2", Binding: "orders", Route: consumer.Route{Version: "2"}},
		func(ctx context.Context, tx *sql.Tx, _ consumer.Message, o OrderV2) error {
			return insert(ctx, tx, o.ID, o.Cents)
		})
	if err != nil {
		log.Fatal(err)
	}

	defer c.Stop(ctx)

	deliver := func(id, version, payload string) {
		msg := txbox.Message{ID: id, Topic: "orders.placed", Payload: []byte(payload),
			Headers: map[string]string{consumer.DefaultVersionHeader: version}}
		res := txboxtest.Deliver(ctx, exampleTB{}, broker, c, "orders", msg, nil)
		fmt.Println(id, res.Outcome)
	}
	deliver("m1", "1", `{"id":"o-1","amount":19.99}`)
	deliver("m2", "2", `{"id":"o-2","cents":500}`)
	deliver("m2", "2", `{"id":"o-2","cents":500}`) // redelivered
	deliver("m3", "2", `{"id":"o-3","cents":"five"}`)
	deliver("m4", "3", `{"id":"o-4"}`)
	for _, dl := range broker.DeadLetters() {
		fmt.Println("dead letter", dl.Message.ID+":", dl.Cause)
	}
	var n int
	_ = db.QueryRow("SELECT count(*) FROM orders").Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// m1 acked
	// m2 acked
	// m2 duplicate
	// m3 dead-lettered
	// m4 dead-lettered
	// dead letter m3: txbox/inbox: handler of orders.placed.v2 message "m3": permanent: decode the payload of message "m3" as JSON into consumer_test.OrderV2: json: cannot unmarshal string into Go struct field OrderV2.cents of type int64
	// dead letter m4: txbox/consumer: no route claims the message: binding "orders" has no route for topic "orders.placed", version "3", content type ""
	// orders: 2
}

// exampleTB stands for a test's *testing.T: it stops the example on a
// failure.
type exampleTB struct{}

func (exampleTB) Helper()                        {}
func (exampleTB) Cleanup(func())                 {}
func (exampleTB) Errorf(format string, a ...any) { log.Fatalf(format, a...) }
func (exampleTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
