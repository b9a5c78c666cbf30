package outboxsql_test

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// plainPool hides the TxBeginner of the pool it wraps, as a third-party
// driver without the capability would.
type plainPool struct{ p txboxdriver.Pool }

func (p plainPool) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return p.p.Exec(ctx, q, args...)
}
func (p plainPool) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	return p.p.Query(ctx, q, args...)
}
func (p plainPool) Begin(ctx context.Context) (txboxdriver.Tx, error) { return p.p.Begin(ctx) }

// On MySQL the claim transaction runs at READ COMMITTED, whether the pool
// can begin a transaction at a level (txboxsql) or not (the fallback).
func TestMySQLClaimReadCommitted(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	drv := txboxsql.New(db, txboxdriver.MySQL)
	ctx := context.Background()
	migrated(t, drv)
	row := outboxsql.Row{ID: "0190b5a0-0000-7000-8000-000000000001", Topic: "t", Payload: []byte("x"), Headers: "{}"}
	testenv.Must(t, outboxsql.NewInserter(txboxdriver.MySQL, "`txbox_outbox`").Insert(ctx, drv.Pool(), []outboxsql.Row{row}), "insert")

	for name, pool := range map[string]txboxdriver.Pool{"TxBeginner": drv.Pool(), "fallback": plainPool{drv.Pool()}} {
		if _, ok := pool.(txboxdriver.TxBeginner); ok != (name == "TxBeginner") {
			t.Fatalf("%s: TxBeginner %v", name, ok)
		}
		s, err := outboxsql.NewStore(txboxdriver.MySQL, pool, "`txbox_outbox`", time.Minute)
		testenv.Must(t, err, "outboxsql.NewStore")
		b, err := s.Claim(ctx, 1, 0)
		testenv.Must(t, err, "%s: claim", name)
		if len(b.Rows) != 1 {
			t.Fatalf("%s: claimed %d rows, want 1", name, len(b.Rows))
		}
		// READ COMMITTED, not MySQL's REPEATABLE READ: a row that another
		// connection commits meanwhile is seen by the claim transaction's
		// next plain read. (INNODB_TRX is a cache refreshed every 100 ms:
		// no use for this.)
		count := func() int {
			rows, err := b.Tx().Query(ctx, "SELECT count(*) FROM txbox_outbox")
			testenv.Must(t, err, "%s: count", name)
			defer rows.Close()
			var n int
			if rows.Next() {
				testenv.Must(t, rows.Scan(&n), "scan")
			}
			return n
		}
		before := count()
		_, err = db.ExecContext(ctx, "INSERT INTO txbox_outbox (message_id, topic, payload, headers) VALUES (UUID(), 'other', 'y', '{}')")
		testenv.Must(t, err, "%s: insert from another connection", name)
		if after := count(); after != before+1 {
			t.Errorf("%s: the claim transaction saw %d rows after another committed one more than its %d: not READ COMMITTED", name, after, before)
		}
		testenv.Must(t, b.Release(ctx), "%s: release", name)
	}
}
