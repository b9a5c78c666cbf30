package testenv

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// CERow is one outbox row the CloudEvents conformance tests write with
// plain SQL, as a writer in another language would.
type CERow struct {
	ID, Topic string
	Headers   map[string]string
	Payload   string
	// Forged marks a row whose headers use a name the broker's CloudEvents
	// binding reserves: the relay must park it dead, unpublished.
	Forged bool
	// CreatedAt is the row's created_at as the relay read it (set by
	// RelayCERows).
	CreatedAt time.Time
}

// CERows returns the rows of a conformance test: ids and a topic with what
// the NATS binding percent-encodes (non-ASCII, space, '"', '%'), content
// types named in two cases and absent, and a row that forges the
// attribute header forged (e.g. "CE-ID"). topic gives each row's topic
// from a suffix ("café" may be refused by the broker: Kafka).
func CERows(topic func(suffix string) string, forged string) []CERow {
	return []CERow{
		{ID: "ce-%41-é", Topic: topic("café"), Payload: `{"n":1}`,
			Headers: map[string]string{"content-type": "application/json; charset=utf-8", "X-Note": "naïve"}},
		{ID: `ce id "quoted"`, Topic: topic("plain"), Payload: "text",
			Headers: map[string]string{"Content-Type": "text/plain"}},
		{ID: "100%", Topic: topic("plain"), Payload: "bare"},
		{ID: "forged-" + forged, Topic: topic("plain"), Payload: "forged", Forged: true,
			Headers: map[string]string{forged: "forged-value", "Content-Type": "text/plain"}},
	}
}

// RelayCERows writes rows into a new SQLite outbox with plain SQL, relays
// them through pub until none is pending (failing when none settles for
// 30 seconds), and checks that each forged row is dead, unpublished, with
// a last_error naming the reserved header, and every other row published.
// It sets each row's CreatedAt.
func RelayCERows(t *testing.T, pub txbox.Publisher, rows []CERow) {
	t.Helper()
	ctx := context.Background()
	db := SQLite(t)
	drv := txboxsql.New(db, txboxdriver.SQLite)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	Must(t, err, "migrate up")
	for _, r := range rows {
		h, err := json.Marshal(r.Headers)
		Must(t, err, "headers")
		if r.Headers == nil {
			h = []byte("{}")
		}
		_, err = db.ExecContext(ctx, `INSERT INTO txbox_outbox (message_id, topic, payload, headers) VALUES (?, ?, ?, ?)`,
			r.ID, r.Topic, []byte(r.Payload), string(h))
		Must(t, err, "insert %q", r.ID)
	}
	rl, err := relay.New(drv, pub, relay.Config{PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	Must(t, err, "relay")
	Must(t, rl.Start(ctx), "start relay")
	defer func() { _ = rl.Stop(ctx) }()
	pending, last, since := -1, -1, time.Now()
	for pending != 0 {
		Must(t, db.QueryRowContext(ctx, `SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL AND dead_at IS NULL`).Scan(&pending), "count")
		if pending != last {
			last, since = pending, time.Now()
		} else if time.Since(since) > 30*time.Second {
			t.Fatalf("%d rows still pending, none settled for 30s", pending)
		}
		time.Sleep(10 * time.Millisecond) // polling the table, not waiting for an event
	}
	for i, r := range rows {
		var published, dead sql.NullInt64
		var lastErr sql.NullString
		var created int64
		Must(t, db.QueryRowContext(ctx, `SELECT published_at, dead_at, last_error, created_at FROM txbox_outbox WHERE message_id = ?`, r.ID).
			Scan(&published, &dead, &lastErr, &created), "row %q", r.ID)
		rows[i].CreatedAt = time.UnixMicro(created).UTC()
		switch {
		case r.Forged && (published.Valid || !dead.Valid):
			t.Errorf("row %q forges a CloudEvents attribute: published %v, dead %v; want it parked dead", r.ID, published.Valid, dead.Valid)
		case r.Forged && !strings.Contains(lastErr.String, "reserved"):
			t.Errorf("row %q parked with last_error %q; want the reserved header named", r.ID, lastErr.String)
		case !r.Forged && !published.Valid:
			t.Errorf("row %q not published (dead %v, last_error %q)", r.ID, dead.Valid, lastErr.String)
		}
	}
}

// PercentDecode decodes a NATS header value once, as the CloudEvents NATS
// binding's decoder must; it fails t on a value that is not printable
// ASCII without space, '"' or a stray '%' (what the encoding leaves).
func PercentDecode(t testing.TB, what, v string) string {
	t.Helper()
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f || c == '"' {
			t.Errorf("%s %q: %q at byte %d is not percent-encoded", what, v, c, i)
		}
	}
	d, err := url.PathUnescape(v)
	if err != nil {
		t.Errorf("%s %q: %v", what, v, err)
	}
	return d
}

// CheckCloudEvent checks e, the event the CloudEvents Go SDK read from the
// message of row r, against every attribute txbox sets: specversion, id,
// source, type, time, datacontenttype (the row's Content-Type in any
// case, or none), the data, and no extension. decode undoes the binding's
// value encoding (PercentDecode for NATS; the identity elsewhere).
func CheckCloudEvent(t testing.TB, e *cloudevents.Event, r CERow, source string, decode func(what, v string) string) {
	t.Helper()
	if err := e.Validate(); err != nil {
		t.Errorf("row %q: the SDK's event is not valid: %v", r.ID, err)
	}
	ct := ""
	for k, v := range r.Headers {
		if strings.EqualFold(k, "Content-Type") {
			ct = v
		}
	}
	for _, c := range []struct{ name, got, want string }{
		{"specversion", e.SpecVersion(), "1.0"},
		{"id", decode("id", e.ID()), r.ID},
		{"source", decode("source", e.Source()), source},
		{"type", decode("type", e.Type()), r.Topic},
		{"datacontenttype", decode("datacontenttype", e.DataContentType()), ct},
		{"data", string(e.Data()), r.Payload},
	} {
		if c.got != c.want {
			t.Errorf("row %q: %s = %q, want %q", r.ID, c.name, c.got, c.want)
		}
	}
	if !e.Time().Equal(r.CreatedAt) {
		t.Errorf("row %q: time = %v, want the row's created_at %v", r.ID, e.Time(), r.CreatedAt)
	}
	if ext := e.Extensions(); len(ext) > 0 {
		t.Errorf("row %q: extensions %v, want none (only txbox's attributes)", r.ID, ext)
	}
}
