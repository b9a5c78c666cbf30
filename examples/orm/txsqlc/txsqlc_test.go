package txsqlc_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
	"github.com/txbox/txbox/examples/orm/txsqlc/shopdb"
	"github.com/txbox/txbox/examples/orm/txsqlc/shopdblite"
	"github.com/txbox/txbox/examples/orm/txsqlc/shopdbmysql"
)

func TestMain(m *testing.M) { ormtest.Main(m) }

// createOrder is the generated CreateOrder of d's package, on tx.
func createOrder(ctx context.Context, d txboxdriver.Dialect, tx *sql.Tx, c shop.Checkout) error {
	switch d {
	case txboxdriver.SQLite:
		return shopdblite.New(tx).CreateOrder(ctx, shopdblite.CreateOrderParams{ID: c.OrderID, Customer: c.Customer, Total: c.Total})
	case txboxdriver.MySQL:
		return shopdbmysql.New(tx).CreateOrder(ctx, shopdbmysql.CreateOrderParams{ID: c.OrderID, Customer: c.Customer, Total: c.Total})
	default:
		return shopdb.New(tx).CreateOrder(ctx, shopdb.CreateOrderParams{ID: c.OrderID, Customer: c.Customer, Total: c.Total})
	}
}

func TestSqlc(t *testing.T) {
	ormtest.Run(t, ormtest.All, ormtest.ORM{
		Place: func(ctx context.Context, env ormtest.Env, c shop.Checkout, then func(*sql.Tx) error) error {
			tx, err := env.DB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if err := createOrder(ctx, env.Dialect, tx, c); err != nil {
				return err
			}
			if _, err := env.Outbox.Add(ctx, tx, shop.OrderPlaced(c.OrderID, c.Customer)); err != nil {
				return err
			}
			if err := then(tx); err != nil {
				return err
			}
			return tx.Commit()
		},
		Handler: func(env ormtest.Env) func(context.Context, *sql.Tx, consumer.Message) error {
			return func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
				c, err := shop.DecodeCheckout(msg.Payload)
				if err != nil {
					return consumer.Permanent(err)
				}
				if err := createOrder(ctx, env.Dialect, tx, c); err != nil {
					return err
				}
				_, err = env.Outbox.Add(ctx, tx, shop.OrderPlaced(c.OrderID, c.Customer))
				return err
			}
		},
	})
}

// schema.sql, which sqlc reads, is the DDL the tests create the table with.
func TestSchemaMatchesDDL(t *testing.T) {
	b, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "--") && strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if got := strings.TrimSuffix(strings.Join(lines, "\n"), ";"); got != shop.OrdersDDL {
		t.Fatalf("schema.sql:\n%s\nshop.OrdersDDL:\n%s", got, shop.OrdersDDL)
	}
}
