package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
	"github.com/txbox/txbox/txboxsql"
)

// prefix is the message mode's prefix of these tests.
const prefix = "txbox_test"

// In message mode Add writes the events into the WAL, none into the
// table; eight writers commit concurrently and the relay publishes every
// event once, each key in commit order, and confirms the slot up to the
// last commit.
func TestMessageModeCommitOrderPerKey(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{BatchSize: 7, MessagePrefix: prefix}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	r := newRelay(t, pool, l, cfg)
	start(t, r)
	writersWith(t, pool, txbox.Config{MessagePrefix: prefix}, 8, 40, keysOf(10))
	delivered(t, l, pool)
	if dups := verdict(t, l.snapshot(), committed(t, pool)); dups != 0 {
		t.Fatalf("%d duplicates without any fault", dups)
	}
	confirmedPast(t, pool, cfg, "the last commit")
	var rows int
	testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM txbox_outbox`).Scan(&rows), "rows")
	if rows != 0 {
		t.Fatalf("message mode wrote %d rows into the table", rows)
	}
	for _, m := range l.snapshot()[:3] {
		if m.ID == "" || m.Topic != "cdc.test" || m.CreatedAt.IsZero() {
			t.Fatalf("published %+v", m)
		}
	}
}

// A message-mode event of a rolled-back transaction is never published,
// one a plain-SQL writer emits is, and a table-mode relay on the same
// server passes the events over. Cancel, DeliverAt and message mode on
// another database are refused.
func TestMessageModeRollbackAndTableMode(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{MessagePrefix: prefix}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	tableCfg := cdc.Config{Slot: "table_mode"}
	_, err = cdc.CreateSlot(ctx, pool, tableCfg)
	testenv.Must(t, err, "create table-mode slot")
	l, lt := &ledger{}, &ledger{}
	start(t, newRelay(t, pool, l, cfg))
	start(t, newRelay(t, pool, lt, tableCfg))
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{MessagePrefix: prefix})
	testenv.Must(t, err, "txbox.New")
	tx, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	_, err = ob.Add(ctx, tx, txbox.Message{Topic: "cdc.test", Payload: []byte("rolled back")})
	testenv.Must(t, err, "add")
	testenv.Must(t, tx.Rollback(ctx), "rollback")
	testenv.Must(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "cdc.test", Key: "k", Payload: []byte("committed")},
			txbox.Message{Topic: "cdc.test", Key: "k", Payload: []byte("committed too"), Headers: map[string]string{"X-A": "b"}})
		return err
	}), "commit")
	// A plain-SQL writer, as docs/guide/cdc.md shows it (a payload over
	// 76 bytes: PostgreSQL's base64 breaks its lines).
	long := strings.Repeat("plain SQL ", 10)
	_, err = pool.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, json_build_object('id', 'sql-1',
	    'topic', 'cdc.test', 'key', 'k', 'payload', encode(convert_to($2, 'UTF8'), 'base64'))::text)`, prefix, long)
	testenv.Must(t, err, "plain SQL")
	eventually(t, "the committed events published", func() (bool, string) {
		return len(l.snapshot()) >= 3, fmt.Sprint(len(l.snapshot()))
	})
	confirmedPast(t, pool, cfg, "the commit")
	confirmedPast(t, pool, tableCfg, "the commit")
	got := l.snapshot()
	if len(got) != 3 || string(got[0].Payload) != "committed" || string(got[1].Payload) != "committed too" || got[1].Headers["X-A"] != "b" ||
		got[2].ID != "sql-1" || string(got[2].Payload) != long {
		t.Fatalf("published %+v", got)
	}
	if n := len(lt.snapshot()); n != 0 {
		t.Fatalf("the table-mode relay published %d events of message mode", n)
	}
	if _, err := ob.Cancel(ctx, nil, got[0].ID); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("cancel in message mode: %v", err)
	}
	if _, err := txbox.New(txboxsql.New(nil, txboxdriver.SQLite), txbox.Config{MessagePrefix: prefix}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("message mode on SQLite: %v", err)
	}
	_, err = ob.AddNoTx(ctx, txbox.Message{Topic: "cdc.test", Payload: []byte("later"), DeliverAt: time.Now().Add(time.Hour)})
	var invalid *txbox.InvalidMessageError
	if !errors.As(err, &invalid) || invalid.Field != "DeliverAt" {
		t.Fatalf("DeliverAt in message mode: %v", err)
	}
}

// A message-mode event the broker keeps rejecting is recorded dead as a
// row of the outbox table (the table holds message mode's dead letters);
// `txbox dead` lists it, and once redriven it is published from the
// table and marked published_at. The other events go on meanwhile.
func TestMessageModeDeadLetters(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{MaxAttempts: 2, RedriveInterval: 50 * time.Millisecond, MessagePrefix: prefix}
	l, r := poisoned(t, pool, cfg, "k01:2", "poison")
	writersWith(t, pool, txbox.Config{MessagePrefix: prefix}, 2, 20, keysOf(3))
	letters, err := dead.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "dead.New")
	var deadList []dead.Message
	eventually(t, "the poison event in the dead list", func() (bool, string) {
		deadList, err = letters.List(ctx, 10)
		testenv.Must(t, err, "dead list")
		return len(deadList) == 1, fmt.Sprintf("%d dead listed; %s", len(deadList), progress(r, l))
	})
	var payload string
	testenv.Must(t, pool.QueryRow(ctx, `SELECT convert_from(payload, 'UTF8') FROM txbox_outbox WHERE id = $1`, deadList[0].Seq).Scan(&payload), "payload")
	if d := deadList[0]; payload != "k01:2" || d.Key != "k01" || d.Topic != "cdc.test" || d.Attempts != 2 || !strings.Contains(d.LastError, "poison") {
		t.Fatalf("dead letter %+v, payload %q", d, payload)
	}
	othersDelivered(t, l, pool)
	confirmedPast(t, pool, cfg, "the dead letter")
	l.setFail(nil)
	n, err := letters.Redrive(ctx)
	testenv.Must(t, err, "redrive")
	if n != 1 {
		t.Fatalf("redrove %d", n)
	}
	delivered(t, l, pool)
	// Redriven marks the row after the broker's ack, which the ledger
	// has seen already.
	eventually(t, "the redriven dead letter's published_at", func() (bool, string) {
		var published bool
		testenv.Must(t, pool.QueryRow(ctx, `SELECT published_at IS NOT NULL FROM txbox_outbox WHERE payload = 'k01:2'`).Scan(&published), "published_at")
		return published, "no published_at"
	})
	if st := statsOf(r); st.Dead != 1 {
		t.Fatalf("stats: %+v", st)
	}
}
