package cdc_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// Every column the relay reads comes through the stream as it was written
// (binary payload, headers, key, message id, created_at), rows written
// with plain SQL too; a row that breaks the contract (a reserved header)
// is recorded dead in the table, unpublished, and the rows after it go on.
func TestRowsAsWritten(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	start(t, newRelay(t, pool, l, cfg))
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	bin := []byte{0, 1, 2, '\\', 'x', 0xff, 0xfe, '\n'}
	want := txbox.Message{ID: "my-id-1", Topic: "cdc.a", Key: "k1", Payload: bin,
		Headers: map[string]string{"Content-Type": "application/octet-stream", "traceparent": "00-ab-cd-01", "note": `quote " and \ and ü`}}
	testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, want)), "add")
	_, err = pool.Exec(ctx, `INSERT INTO txbox_outbox (topic, payload, headers) VALUES ('cdc.bad', 'x', '{"Nats-Msg-Id":"evil"}')`)
	testenv.Must(t, err, "bad row")
	_, err = pool.Exec(ctx, `INSERT INTO txbox_outbox (topic, payload) VALUES ('cdc.plain', convert_to('{"a":1}', 'UTF8'))`)
	testenv.Must(t, err, "plain row")
	eventually(t, "two messages published", func() (bool, string) {
		n := len(l.snapshot())
		return n >= 2, fmt.Sprintf("published %d", n)
	})
	got := l.snapshot()
	if len(got) != 2 {
		t.Fatalf("published %d messages, want 2: %+v", len(got), got)
	}
	// The two rows have no order between them (no common key): with
	// publishes in flight side by side either may be acknowledged first.
	g, p := got[0], got[1]
	if g.Topic != want.Topic {
		g, p = p, g
	}
	var created time.Time
	testenv.Must(t, pool.QueryRow(ctx, `SELECT created_at FROM txbox_outbox WHERE message_id = 'my-id-1'`).Scan(&created), "created_at")
	if g.ID != want.ID || g.Topic != want.Topic || g.Key != want.Key || !bytes.Equal(g.Payload, want.Payload) || !g.CreatedAt.Equal(created) {
		t.Fatalf("got %+v\nwant %+v (created_at %s)", g, want, created)
	}
	for k, v := range want.Headers {
		if g.Headers[k] != v {
			t.Fatalf("header %s: got %q, want %q", k, g.Headers[k], v)
		}
	}
	if p.Topic != "cdc.plain" || string(p.Payload) != `{"a":1}` || p.Key != "" || p.ID == "" || len(p.Headers) != 0 {
		t.Fatalf("plain SQL row: %+v", p)
	}
	var lastErr string
	eventually(t, "the bad row recorded dead", func() (bool, string) {
		err := pool.QueryRow(ctx, `SELECT coalesce(last_error, '') FROM txbox_outbox WHERE topic = 'cdc.bad' AND dead_at IS NOT NULL`).Scan(&lastErr)
		return err == nil, ""
	})
	if !bytes.Contains([]byte(lastErr), []byte("reserved")) {
		t.Fatalf("the dead row's error: %q", lastErr)
	}
}
