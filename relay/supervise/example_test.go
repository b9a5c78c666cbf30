package supervise_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/supervise"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// sqliteDB is an open SQLite database of the stores.
type sqliteDB struct {
	drv *txboxsql.Driver
	pub txbox.Publisher
}

func (d sqliteDB) Relay(s supervise.Store) (*relay.Relay, error) {
	return relay.New(d.drv, d.pub, relay.Config{Table: s.Table})
}
func (d sqliteDB) Transient(err error) bool { return txboxdriver.IsTransientFor(d.drv, err) }
func (d sqliteDB) Close() error             { return d.drv.DB().Close() }

// Relay the outbox tables of two tenants, each in a SQLite file of its
// own, in one group until SIGINT or SIGTERM. A file that cannot be opened
// holds up its own tenant only; SetStores adds and removes tenants while
// the relays run.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	broker := txboxtest.NewBroker(txboxtest.BrokerConfig{}) // in production natsjs, txboxrabbitmq, …
	sup, err := supervise.New(supervise.Config{
		Stores: []supervise.Store{
			{Name: "acme", Database: "acme.db"},
			{Name: "globex", Database: "globex.db"},
		},
		Open: func(ctx context.Context, path string) (supervise.Database, error) {
			db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path)) // with modernc.org/sqlite imported
			if err != nil {
				return nil, err
			}
			if err := db.PingContext(ctx); err != nil {
				db.Close()
				return nil, err
			}
			return sqliteDB{drv: txboxsql.New(db, txboxdriver.SQLite), pub: broker}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sup.Close()
	if err := sup.Start(ctx); err != nil {
		log.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-sup.Stopped(): // every store left out, or the publisher closed for good
		log.Fatal(sup.Err())
	}
}
