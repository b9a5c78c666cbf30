package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// badRow is a row that breaks the outbox contract, as a plain-SQL writer
// could store it, and what its dead row's error must say.
type badRow struct {
	name    string
	cols    map[string]string // column → SQL literal, over the defaults below
	says    string
	dialect txboxdriver.Dialect // "" on every dialect
}

func sqlText(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func badRows(prefix string) []badRow {
	return []badRow{
		{name: "header name with a space", cols: map[string]string{"headers": `'{"bad key":"1"}'`}, says: `name "bad key"`},
		{name: "header name with a slash", cols: map[string]string{"headers": `'{"a/b":"1"}'`}, says: "a header name is letters"},
		{name: "non-ASCII header name", cols: map[string]string{"headers": `'{"größe":"1"}'`}, says: "a header name is letters"},
		{name: "reserved header", cols: map[string]string{"headers": `'{"Nats-Msg-Id":"forged"}'`}, says: "reserved"},
		{name: "header value with a leading space", cols: map[string]string{"headers": `'{"a":" b"}'`}, says: "white space"},
		{name: "header value not a string", cols: map[string]string{"headers": `'{"a":1}'`}, says: "not a JSON object of strings"},
		{name: "headers not an object", cols: map[string]string{"headers": `'[1]'`}, says: "not a JSON object of strings"},
		{name: "topic of 5000 bytes", cols: map[string]string{"topic": sqlText(prefix + strings.Repeat("t", 5000))}, says: "over the limit of 256"},
		{name: "topic with a space", cols: map[string]string{"topic": sqlText(prefix + "bad topic")}, says: "white space"},
		{name: "empty message id", cols: map[string]string{"message_id": "''"}, says: "message_id is empty"},
		{name: "message id of 300 bytes", cols: map[string]string{"message_id": sqlText(strings.Repeat("i", 300))}, says: "over the limit of 256"},
		{name: "message id with a tab", cols: map[string]string{"message_id": sqlText("a\tb")}, says: "control character"},
		{name: "message id with CR LF", cols: map[string]string{"message_id": sqlText("a\r\nb")}, says: "control character"},
		{name: "key of 300 bytes", cols: map[string]string{"ordering_key": sqlText(strings.Repeat("k", 300))}, says: "over the limit of 256"},
		{name: "attempts holding text", cols: map[string]string{"attempts": "'abc'"}, says: "attempts holds", dialect: txboxdriver.SQLite},
		{name: "created_at holding text", cols: map[string]string{"created_at": "'abc'"}, says: "created_at holds", dialect: txboxdriver.SQLite},
	}
}

// insertRow writes one row with plain SQL: topic prefix+"bad", a fresh id
// and a small payload, overridden by cols.
func insertRow(f fixture, prefix string, n int, cols map[string]string) error {
	payload := "X'78'"
	if f.dialect == txboxdriver.Postgres {
		payload = `'\x78'::bytea`
	}
	vals := map[string]string{"message_id": sqlText(fmt.Sprintf("%sbad-%d", prefix, n)), "topic": sqlText(prefix + "bad"), "payload": payload}
	for k, v := range cols {
		vals[k] = v
	}
	var names, lits []string
	for k, v := range vals {
		names = append(names, k)
		lits = append(lits, v)
	}
	return f.tryExec("INSERT INTO txbox_outbox (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(lits, ", ") + ")")
}

// dropContract removes the constraints (triggers on SQLite) of the
// contract migration; tests/migrate checks that they refuse these rows.
func dropContract(t testing.TB, f fixture) {
	t.Helper()
	stmts := []string{`DROP TRIGGER "txbox_outbox_contract_insert"`, `DROP TRIGGER "txbox_outbox_contract_update"`}
	if f.dialect != txboxdriver.SQLite {
		stmts = nil
		for _, r := range []string{"message_id_length", "message_id_control", "topic_length", "topic_chars", "ordering_key_length", "ordering_key_control", "headers_object"} {
			stmts = append(stmts, "ALTER TABLE txbox_outbox DROP CONSTRAINT txbox_outbox_"+r)
		}
	}
	for _, q := range stmts {
		if err := f.tryExec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// One bad row of each kind beside 1,000 good ones: every good one is
// delivered, every bad one is dead at once (no broker call, no retries)
// with an error that says what is wrong, listed by the dead-letter tools,
// and a bad keyed row parks only its own key. (A kind the column's type
// refuses at INSERT, as MySQL's VARCHAR(256) does, passes.)
func TestOneBadRowNeverStopsDelivery(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, f fixture) {
		nc := testenv.NATS(t)
		prefix := testenv.Subject()
		s := stream(t, nc, prefix, jetstream.StreamConfig{})
		ctx := context.Background()

		// The relay's own checks, with the table's out of the way: a table
		// migrated by an older txbox, or constraints a team dropped.
		dropContract(t, f)
		var good []txbox.Message
		for i := range 1000 {
			good = append(good, txbox.Message{Topic: prefix + "good", Payload: []byte(fmt.Sprint(i))})
		}
		f.add(t, true, good[:500]...)
		stored := map[string]string{} // message id → what its error must say
		for i, b := range badRows(prefix) {
			if b.dialect != "" && b.dialect != f.dialect {
				continue
			}
			id := fmt.Sprintf("%sbad-%d", prefix, i)
			if err := insertRow(f, prefix, i, b.cols); err != nil {
				// MySQL's VARCHAR(256) columns refuse longer values.
				t.Logf("%s: refused at INSERT: %v", b.name, err)
				continue
			}
			if _, ok := b.cols["message_id"]; ok {
				id = "" // found by its error instead
			}
			stored[b.name] = id
		}
		// A bad keyed row parks its key: K's next message waits behind it.
		testenv.Must(t, insertRow(f, prefix, 99, map[string]string{"ordering_key": "'K'", "headers": `'{"bad key":"1"}'`}), "insert keyed bad row")
		f.add(t, true, txbox.Message{ID: prefix + "after-K", Topic: prefix + "good", Key: "K", Payload: []byte("parked")})
		f.add(t, true, good[500:]...)
		if len(stored) < 10 {
			t.Fatalf("only %d kinds of bad row could be stored", len(stored))
		}
		nBad := int64(len(stored) + 1)

		pub := &countingNATS{Publisher: publisher(t, nc)}
		r := f.newRelay(t, pub, relay.Config{PollInterval: 10 * time.Millisecond, BatchSize: 64})
		startRelay(t, r)
		eventually(t, "the good rows delivered and the bad ones dead", func() bool {
			return streamMsgs(t, s) == 1000 && f.count(t, "dead_at IS NOT NULL") == nBad
		})
		if n := f.count(t, "dead_at IS NOT NULL AND attempts <> 1"); n != 0 {
			t.Errorf("%d bad rows took more than the one attempt that parked them", n)
		}
		if testenv.RelayStats(r).Rejected != 0 {
			t.Errorf("the broker rejected %d messages: the bad rows reached it", testenv.RelayStats(r).Rejected)
		}
		if got := testenv.RelayStats(r).Invalid; got != nBad {
			t.Errorf("Invalid counter %d, want %d", got, nBad)
		}
		if f.count(t, "message_id = '"+prefix+"after-K' AND published_at IS NULL") != 1 {
			t.Error("the message behind the bad keyed row was not parked")
		}

		letters, err := f.dead(t).List(ctx, 100)
		testenv.Must(t, err, "dead list")
		if int64(len(letters)) != nBad {
			t.Fatalf("dead list shows %d rows, want %d", len(letters), nBad)
		}
		for name, id := range stored {
			says := ""
			for _, b := range badRows(prefix) {
				if b.name == name {
					says = b.says
				}
			}
			found := false
			for _, l := range letters {
				if (id == "" || l.ID == id) && strings.Contains(l.LastError, "invalid row") && strings.Contains(l.LastError, says) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no dead row whose error says %q", name, says)
			}
		}
		if pub.sawBad {
			t.Error("a bad row reached the publisher")
		}
	})
}

// countingNATS notes whether a message on a "bad" topic was ever published.
type countingNATS struct {
	txbox.Publisher
	sawBad bool
}

func (p *countingNATS) Publish(ctx context.Context, msgs []txbox.Message) []error {
	for _, m := range msgs {
		if strings.Contains(m.Topic, "bad") {
			p.sawBad = true
		}
	}
	return p.Publisher.Publish(ctx, msgs)
}

// oneFails acknowledges every message but the one with id bad, whose
// failure it reports as a plain error (not txbox.Reject), as an adapter that
// does not classify would.
type oneFails struct {
	bad   string
	calls int
}

func (p *oneFails) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.calls++
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if m.ID == p.bad {
			errs[i] = fmt.Errorf("broker says: this message is malformed")
		}
	}
	return errs
}

// A failure that the broker followed with the acknowledgement of a later
// message of the batch is about that message, whatever the adapter called
// it: it costs attempts and goes dead, and the others are delivered. (A
// failure with no later ack cannot be told from an outage: it costs
// nothing.)
func TestFailureBeforeALaterAckIsTheMessages(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 4)
	var msgs []txbox.Message
	for i := range 10 {
		msgs = append(msgs, txbox.Message{ID: fmt.Sprint("m", i), Topic: "t", Payload: []byte("x")})
	}
	f.add(t, true, msgs...)
	pub := &oneFails{bad: "m3"}
	r := f.newRelay(t, pub, relaytest.With(relay.Config{MaxAttempts: 2, BatchSize: 10}, relaytest.Config{RetryDelay: time.Millisecond}))
	ctx := context.Background()
	// New messages keep coming, so m3 always has a later message beside it.
	for i := range 50 {
		if _, err := r.Round(ctx); err != nil {
			t.Fatalf("round: %v (a message-specific failure failed the round)", err)
		}
		if f.count(t, "dead_at IS NOT NULL") == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
		f.add(t, true, txbox.Message{ID: fmt.Sprint("later", i), Topic: "t", Payload: []byte("x")})
	}
	if f.count(t, "message_id = 'm3' AND dead_at IS NOT NULL AND attempts = 2") != 1 {
		t.Fatal("m3 is not dead after 2 attempts")
	}
	if n := f.count(t, "published_at IS NULL AND message_id LIKE 'm%'"); n != 1 {
		t.Fatalf("%d of m0..m9 unpublished, want only m3", n)
	}
}
