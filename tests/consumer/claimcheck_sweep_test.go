package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

// TestClaimCheckSweepByRelay, on each database with NATS JetStream: the
// relay's cleanup (relay.Config.ClaimChecks) deletes a stored payload
// only once both sides are done with it. Every payload is backdated ten
// days, so a sweep by age alone would delete them all at once. A payload
// whose message is still to deliver (due tomorrow) or dead is kept through
// sweep after sweep, also when marked released by mistake; one whose
// message was delivered but not yet applied (its handler fails) is kept
// for the retention, and the handler, applying it at last, sees the whole
// payload; once released for longer than the retention (backdated), the
// relay deletes the delivered ones and keeps the others.
func TestClaimCheckSweepByRelay(t *testing.T) {
	t.Parallel()
	for _, dbName := range e2eDatabases {
		t.Run(dbName, func(t *testing.T) {
			t.Parallel()
			switch dbName {
			case "pgx":
				claimCheckSweep(t, pgxDB(t, 10), newBroker(t, "nats"))
			case "sqlite":
				claimCheckSweep(t, sqliteDB(t), newBroker(t, "nats"))
			case "mysql":
				claimCheckSweep(t, mysqlDB(t), newBroker(t, "nats"))
			}
		})
	}
}

func claimCheckSweep[TTx any](t *testing.T, d db[TTx], b *broker) {
	ctx := context.Background()
	const outboxTable, claims = "ccs_outbox", "ccs_claims"
	d.migrateAll(t, outboxTable)
	m, err := txboxmigrate.New(d.drv, txboxmigrate.Config{NoOutbox: true, ClaimCheckTables: []string{claims}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up claim check")
	store, err := claimcheck.New(d.drv, claimcheck.Config{Table: claims, OutboxTables: []string{outboxTable}, Retention: time.Hour})
	testenv.Must(t, err, "claimcheck.New")
	ob, err := txbox.New(d.drv, txbox.Config{Table: outboxTable, ClaimCheck: store, ClaimCheckThreshold: 1024})
	testenv.Must(t, err, "outbox")

	// The clock of each dialect, as the tables are written.
	var now, day, tenDays, twoHours string
	switch d.drv.Dialect() {
	case txboxdriver.Postgres:
		now, day, tenDays, twoHours = "now()", "interval '1 day'", "interval '10 days'", "interval '2 hours'"
	case txboxdriver.SQLite:
		now, day, tenDays, twoHours = "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)", "86400000000", "864000000000", "7200000000"
	case txboxdriver.MySQL:
		now, day, tenDays, twoHours = "UTC_TIMESTAMP(6)", "INTERVAL 1 DAY", "INTERVAL 10 DAY", "INTERVAL 2 HOUR"
	}

	payload := func(id string) []byte { return bytes.Repeat([]byte(id), 4096/len(id)+1) }
	ids := []string{"done", "late", "pending", "dead"}
	tx, dtx, err := d.drv.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	for _, id := range ids {
		testenv.Must(t, testenv.Err(ob.Add(ctx, tx, txbox.Message{ID: id, Topic: b.topic("orders"), Payload: payload(id)})), "add %s", id)
	}
	testenv.Must(t, dtx.Commit(ctx), "commit")
	// "pending" is due tomorrow, "dead" is dead: neither is delivered.
	d.exec(t, "UPDATE "+outboxTable+" SET next_attempt_at = "+now+" + "+day+" WHERE message_id = 'pending'")
	d.exec(t, "UPDATE "+outboxTable+" SET dead_at = "+now+", last_error = 'test' WHERE message_id = 'dead'")
	d.exec(t, "UPDATE "+claims+" SET created_at = "+now+" - "+tenDays)
	if n := d.count(t, "SELECT count(*) FROM "+claims); n != 4 {
		t.Fatalf("claim check table holds %d payloads, want 4", n)
	}

	var mu sync.Mutex
	applied := map[string][]byte{}
	lateTries := 0
	gate := false
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, ClaimCheck: store, MaxDeliveries: 100000,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: quiet})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "ccs", Binding: b.binding("orders")},
		func(ctx context.Context, tx TTx, msg consumer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if msg.ID == "late" && !gate {
				lateTries++
				return errors.New("not yet")
			}
			applied[msg.ID] = msg.Payload
			return nil
		}), "register")
	testenv.Must(t, c.Start(ctx), "start consumer")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	r, err := relay.New(d.drv, b.pub, relaytest.With(relay.Config{Table: outboxTable, PollInterval: 20 * time.Millisecond, DisableNotify: true, ClaimChecks: []*claimcheck.Store{store}, Logger: quiet}, relaytest.Config{CleanupInterval: 20 * time.Millisecond}))
	testenv.Must(t, err, "relay")
	testenv.Must(t, r.Start(ctx), "start relay")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })

	stored := func() int64 { return d.count(t, "SELECT count(*) FROM "+claims) }
	// sweeps waits for n more sweeps of the relay.
	sweeps := func(n int64, what string) {
		t.Helper()
		from := testenv.RelayStats(r).ClaimCheckSweeps
		progressing(t, 30*time.Second, what, func() (int64, bool, string) {
			s := testenv.RelayStats(r).ClaimCheckSweeps
			return s, s >= from+n, fmt.Sprintf("sweeps %d since %d", s, from)
		})
	}

	// "done" is applied, "late" delivered and failing.
	progressing(t, 30*time.Second, "done applied, late tried", func() (int64, bool, string) {
		mu.Lock()
		defer mu.Unlock()
		s := c.Stats()
		if s.DeadLettered > 0 {
			t.Fatalf("a message was dead-lettered before it was applied (its payload swept?): stats %+v", s)
		}
		return s.Handled + s.Retried, applied["done"] != nil && lateTries >= 2,
			fmt.Sprintf("applied %d, late tries %d, stats %+v", len(applied), lateTries, s)
	})
	sweeps(3, "three sweeps")
	if n := stored(); n != 4 {
		t.Fatalf("after sweeps within the retention, %d payloads stored, want all 4", n)
	}
	if n, err := store.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep(1h) of payloads stored ten days ago: %d deleted, %v; want 0 (none released an hour ago)", n, err)
	}
	if n := d.count(t, "SELECT count(*) FROM "+claims+" WHERE released_at IS NOT NULL"); n != 2 {
		t.Fatalf("%d payloads released, want 2 (done, late: delivered)", n)
	}
	size := int64(0)
	for _, id := range ids {
		size += int64(len(payload(id)))
	}
	if st, err := store.Stats(ctx, time.Hour); err != nil || st.Payloads != 4 || st.Bytes != size || st.Unreleased != 2 || st.Due != 0 ||
		st.DueBytes != 0 || st.OldestAge < 10*24*time.Hour {
		t.Fatalf("Stats(1h) = %+v, %v; want 4 payloads of %d bytes, 2 not released, none due, the oldest ten days old", st, err, size)
	}
	if st, err := store.Stats(ctx, time.Microsecond); err != nil || st.Due != 2 || st.DueBytes != int64(len(payload("done"))+len(payload("late"))) {
		t.Fatalf("Stats(1µs) = %+v, %v; want done and late due", st, err)
	}

	// "late" is applied at last, with its payload.
	mu.Lock()
	gate = true
	mu.Unlock()
	progressing(t, 30*time.Second, "late applied", func() (int64, bool, string) {
		mu.Lock()
		defer mu.Unlock()
		s := c.Stats()
		if s.DeadLettered > 0 {
			t.Fatalf("a message was dead-lettered before it was applied (its payload swept?): stats %+v", s)
		}
		return s.Handled + s.Retried, applied["late"] != nil, fmt.Sprintf("stats %+v", s)
	})
	mu.Lock()
	for _, id := range []string{"done", "late"} {
		if !bytes.Equal(applied[id], payload(id)) {
			t.Fatalf("%s: the handler saw %d bytes, not its payload", id, len(applied[id]))
		}
	}
	mu.Unlock()

	// Every payload is marked released two hours ago, "pending" and
	// "dead" by mistake: their rows still hold them.
	d.exec(t, "UPDATE "+claims+" SET released_at = "+now+" - "+twoHours)
	sweeps(2, "two sweeps")
	if n := stored(); n != 2 {
		t.Fatalf("after the payloads were released two hours ago, %d stored, want 2 (pending, dead)", n)
	}
	if n := d.count(t, "SELECT count(*) FROM "+claims+" WHERE released_at IS NULL"); n != 2 {
		t.Fatalf("%d of the payloads kept are held again (released_at NULL), want 2", n)
	}
	refs, err := store.Held(ctx)
	testenv.Must(t, err, "held")
	if len(refs) != 2 {
		t.Fatalf("Held: %v, want the references of pending and dead", refs)
	}
	for ref := range refs {
		if _, err := store.Get(ctx, ref); err != nil {
			t.Fatalf("the payload of a message still to deliver or dead: %v", err)
		}
	}
	if st := testenv.RelayStats(r); st.ClaimCheckSwept != 2 {
		t.Fatalf("ClaimCheckSwept = %d, want 2 (done, late)", st.ClaimCheckSwept)
	}
}

// TestWireFormatClaimCheck follows docs/reference/wire-format.json's
// claim_check object as a foreign consumer would, on each database: the
// message Add writes carries an empty payload and the reference in the
// header named there, and the query named for the dialect, run with the
// reference, returns the payload.
func TestWireFormatClaimCheck(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", "wire-format.json"))
	testenv.Must(t, err, "read wire-format.json")
	var spec struct {
		ClaimCheck struct {
			Header           string            `json:"header"`
			RedisStreamField string            `json:"redisstream_field"`
			DefaultTable     string            `json:"default_table"`
			Query            map[string]string `json:"query"`
		} `json:"claim_check"`
	}
	testenv.Must(t, json.Unmarshal(raw, &spec), "parse wire-format.json")
	cc := spec.ClaimCheck
	if cc.Header != txbox.HeaderClaimCheck || cc.RedisStreamField != "h:"+txbox.HeaderClaimCheck || cc.DefaultTable != claimcheck.DefaultTable {
		t.Fatalf("wire-format.json claim_check %+v: header, field or table differ from txbox.HeaderClaimCheck %q, claimcheck.DefaultTable %q",
			cc, txbox.HeaderClaimCheck, claimcheck.DefaultTable)
	}
	for _, dbName := range e2eDatabases {
		t.Run(dbName, func(t *testing.T) {
			t.Parallel()
			switch dbName {
			case "pgx":
				wireClaimCheck(t, pgxDB(t, 4), cc.Header, cc.Query["postgres"])
			case "sqlite":
				wireClaimCheck(t, sqliteDB(t), cc.Header, cc.Query["sqlite"])
			case "mysql":
				wireClaimCheck(t, mysqlDB(t), cc.Header, cc.Query["mysql"])
			}
		})
	}
}

func wireClaimCheck[TTx any](t *testing.T, d db[TTx], header, query string) {
	ctx := context.Background()
	if query == "" {
		t.Fatalf("wire-format.json names no query for %s", d.drv.Dialect())
	}
	m, err := txboxmigrate.New(d.drv, txboxmigrate.Config{ClaimCheckTables: []string{claimcheck.DefaultTable}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	store, err := claimcheck.New(d.drv, claimcheck.Config{})
	testenv.Must(t, err, "claimcheck.New")
	ob, err := txbox.New(d.drv, txbox.Config{ClaimCheck: store, ClaimCheckThreshold: 1024})
	testenv.Must(t, err, "outbox")
	payload := bytes.Repeat([]byte("wire"), 1000)
	_, err = ob.AddNoTx(ctx, txbox.Message{ID: "w1", Topic: "wire.cc", Payload: payload})
	testenv.Must(t, err, "add")
	// The row as the relay reads it: its headers and payload.
	var hs, ref string
	rows, err := d.drv.Pool().Query(ctx, "SELECT "+map[txboxdriver.Dialect]string{txboxdriver.Postgres: "headers::text", txboxdriver.SQLite: "headers", txboxdriver.MySQL: "CAST(headers AS CHAR)"}[d.drv.Dialect()]+
		", length(payload) FROM "+txbox.DefaultTable)
	testenv.Must(t, err, "read the row")
	var n int64
	for rows.Next() {
		testenv.Must(t, rows.Scan(&hs, &n), "scan")
	}
	rows.Close()
	var headers map[string]string
	testenv.Must(t, json.Unmarshal([]byte(hs), &headers), "headers %s", hs)
	if ref = headers[header]; ref == "" || n != 0 {
		t.Fatalf("the row carries headers %v and a payload of %d bytes; want %s and none", headers, n, header)
	}
	rows, err = d.drv.Pool().Query(ctx, query, ref)
	testenv.Must(t, err, "the query of wire-format.json")
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("the query of wire-format.json found no payload for %q: %v", ref, rows.Err())
	}
	var got []byte
	testenv.Must(t, rows.Scan(&got), "scan")
	if !bytes.Equal(got, payload) {
		t.Fatalf("the query of wire-format.json returned %d bytes, not the payload", len(got))
	}
}
