package txbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.n.Add(int64(len(msgs)))
	return nil
}

// The table is named once, in txbox.Config: migrate, the relay and the
// dead letters built from the Outbox use it, and a config that names
// another table is refused.
func TestOutboxNamesItsTableOnce(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 4)
	ctx := context.Background()
	schema := testenv.Name("tables")
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{Schema: schema, Table: "app_events"})
	testenv.Must(t, err, "txbox.New")
	m, err := txboxmigrate.New(ob, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	var n int
	testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'app_events'", schema).Scan(&n), "lookup")
	if n != 1 {
		t.Fatalf("txboxmigrate.New(outbox) did not create %s.app_events", schema)
	}
	testenv.Must(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return testenv.Err(ob.Add(ctx, tx, txbox.Message{Topic: "t", Payload: []byte("x")}, txbox.Message{Topic: "t", Payload: []byte("y")}))
	}), "add")

	pub := &countingPublisher{}
	r, err := relay.New(ob, pub, relay.Config{PollInterval: 10 * time.Millisecond})
	testenv.Must(t, err, "relay.New")
	if got := r.Config().Table; got != "app_events" {
		t.Fatalf("relay built from the outbox reads table %q", got)
	}
	if _, err := r.Round(ctx); err != nil {
		t.Fatalf("round: %v", err)
	}
	if pub.n.Load() != 2 {
		t.Fatalf("relay published %d of 2", pub.n.Load())
	}
	l, err := dead.New(ob, txbox.Config{})
	testenv.Must(t, err, "dead.New")
	if _, err := l.List(ctx, 10); err != nil {
		t.Fatalf("dead letters of the outbox's table: %v", err)
	}

	if _, err := relay.New(ob, pub, relay.Config{Table: "other"}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("relay config naming another table than the outbox's: %v, want ErrInvalidConfig", err)
	}
	if _, err := dead.New(ob, txbox.Config{Table: "other"}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("dead config naming another table: %v, want ErrInvalidConfig", err)
	}
	if _, err := txboxmigrate.New(ob, txboxmigrate.Config{OutboxTable: "other"}); err == nil {
		t.Error("migrate config naming another table than the outbox's was accepted")
	}
}
