package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxui"
)

// schedFixture is an outbox with two messages scheduled ahead (sched-a in
// two hours, sched-b in three, key <k&1>), one due at once, and one
// scheduled whose time has come (not listed).
type schedFixture struct {
	pool *pgxpool.Pool
	ob   *txbox.Outbox[pgx.Tx]
	in   *inspect.Inspector
	due  map[string]time.Time
}

func newSchedFixture(t *testing.T) *schedFixture {
	t.Helper()
	ctx := context.Background()
	pool, _ := testenv.Postgres(t, 4)
	drv := txboxpgx.New(pool)
	migrateOutbox(t, drv)
	f := &schedFixture{pool: pool, due: map[string]time.Time{}}
	var err error
	f.ob, err = txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	f.in, err = inspect.New(drv, txbox.Config{})
	testenv.Must(t, err, "inspect.New")
	now := time.Now().Truncate(time.Second)
	f.due["sched-a"], f.due["sched-b"] = now.Add(2*time.Hour), now.Add(3*time.Hour)
	_, err = f.ob.AddNoTx(ctx,
		txbox.Message{ID: "sched-a", Topic: "ev.reminders", Payload: []byte(`{}`), DeliverAt: f.due["sched-a"]},
		txbox.Message{ID: "sched-b", Topic: "ev.reminders", Key: "<k&1>", Payload: []byte(`{}`), DeliverAt: f.due["sched-b"]},
		txbox.Message{ID: "now-1", Topic: "ev.orders", Payload: []byte(`{}`)})
	testenv.Must(t, err, "add")
	_, err = pool.Exec(ctx, `INSERT INTO txbox_outbox (message_id, topic, payload, next_attempt_at) VALUES ('came-1', 'ev.orders', '\x7b7d', now() - interval '1 minute')`)
	testenv.Must(t, err, "add a row whose time has come")
	return f
}

// remaining returns the message ids of the rows still in the outbox, in
// reverse order of their names.
func (f *schedFixture) remaining(t *testing.T) []string {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), "SELECT message_id FROM txbox_outbox ORDER BY message_id DESC")
	testenv.Must(t, err, "list")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(t, err, "list")
	return ids
}

// The scheduled messages are listed apart, with their due times (in the
// page and api/state); Cancel is a POST with the page's CSRF token and
// cookie, refused without them, cross-origin, read-only, without a Cancel
// source and (without a token) to a client not on loopback; a cancel that
// comes after the delivery says so and discards nothing.
func TestScheduledListAndCancel(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	const token = "sched-t0ken"
	h, err := txboxui.New(txboxui.Config{Backlog: txboxui.InspectBacklog(f.in), Scheduled: txboxui.InspectScheduled(f.in), Cancel: f.ob.CancelNoTx, Token: token})
	testenv.Must(t, err, "txboxui.New")
	srv := httptest.NewServer(h)
	defer srv.Close()
	op := client{t, srv.URL, token}

	_, state := op.do("GET", "/api/state", nil, nil)
	var st txboxui.State
	testenv.Must(t, json.Unmarshal([]byte(state), &st), "decode state")
	if !st.HasScheduled || len(st.Scheduled) != 2 || st.ScheduledMore || st.Backlog.Scheduled != 2 {
		t.Fatalf("state: scheduled %+v (more %v), backlog scheduled %d; want sched-a and sched-b", st.Scheduled, st.ScheduledMore, st.Backlog.Scheduled)
	}
	for i, id := range []string{"sched-a", "sched-b"} {
		if s := st.Scheduled[i]; s.ID != id || !s.DueAt.Equal(f.due[id]) {
			t.Errorf("scheduled[%d] = %s due %v, want %s due %v", i, s.ID, s.DueAt, id, f.due[id])
		}
	}
	code, page := op.do("GET", "/", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /: %d", code)
	}
	sec := page[strings.Index(page, `<section id="scheduled">`):]
	sec = sec[:strings.Index(sec, "</section>")]
	if strings.Count(sec, `<tr class="scheduled"`) != 2 || strings.Contains(sec, "now-1") || strings.Contains(sec, "came-1") ||
		!strings.Contains(sec, f.due["sched-a"].UTC().Format("2006-01-02 15:04:05Z")) || !strings.Contains(sec, "&lt;k&amp;1&gt;") {
		t.Errorf("the scheduled section lists other rows, or not the due times, or the key unescaped:\n%s", sec)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(sec)
	if csrf == nil || strings.Count(sec, `class="danger cancel"`) != 2 {
		t.Fatalf("no Cancel buttons with a CSRF token in the scheduled section:\n%s", sec)
	}
	form := func(tok, id string) *strings.Reader {
		return strings.NewReader(url.Values{"csrf": {tok}, "id": {id}}.Encode())
	}
	ct := "application/x-www-form-urlencoded"
	cookie := "txboxui_csrf=" + csrf[1]
	good := map[string]string{"Content-Type": ct, "Cookie": cookie, "Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}
	for _, c := range []struct {
		name string
		cl   client
		body *strings.Reader
		hdr  map[string]string
		want int
	}{
		{"no token", client{t, srv.URL, ""}, form(csrf[1], "sched-a"), good, http.StatusUnauthorized},
		{"no CSRF token", op, form("", "sched-a"), good, http.StatusForbidden},
		{"no cookie", op, form(csrf[1], "sched-a"), map[string]string{"Content-Type": ct}, http.StatusForbidden},
		{"cross-origin", op, form(csrf[1], "sched-a"), map[string]string{"Content-Type": ct, "Cookie": cookie, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"no id", op, form(csrf[1], ""), good, http.StatusBadRequest},
	} {
		if code, body := c.cl.do("POST", "/scheduled/cancel", c.body, c.hdr); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	if code, _ := op.do("GET", "/scheduled/cancel", nil, nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET of the cancel: %d, want 405", code)
	}
	if ids := f.remaining(t); len(ids) != 4 {
		t.Fatalf("a refused cancel discarded a row: %v left", ids)
	}

	// Delivered meanwhile: the cancel says so, nothing is discarded.
	_, err = f.pool.Exec(context.Background(), "UPDATE txbox_outbox SET published_at = now() WHERE message_id = 'sched-b'")
	testenv.Must(t, err, "publish sched-b")
	code, _ = op.do("POST", "/scheduled/cancel", form(csrf[1], "sched-b"), good)
	if code != http.StatusSeeOther {
		t.Fatalf("cancel of a delivered message: %d, want 303", code)
	}
	if _, page := op.do("GET", "/?done=cancel&not=delivered", nil, nil); !strings.Contains(page, "Not cancelled: the message was already delivered") {
		t.Errorf("the page does not say the message was delivered")
	}
	code, _ = op.do("POST", "/scheduled/cancel", form(csrf[1], "sched-a"), good)
	if code != http.StatusSeeOther {
		t.Fatalf("cancel: %d, want 303", code)
	}
	if ids := f.remaining(t); strings.Join(ids, ",") != "sched-b,now-1,came-1" {
		t.Errorf("rows left %v, want sched-b (delivered), now-1, came-1", ids)
	}

	// Read-only, no Cancel source, not on loopback without a token: no
	// button, and the POST is refused.
	for name, cfg := range map[string]txboxui.Config{
		"read-only":   {Scheduled: txboxui.InspectScheduled(f.in), Cancel: f.ob.CancelNoTx, ReadOnly: true},
		"no Cancel":   {Scheduled: txboxui.InspectScheduled(f.in)},
		"not on loop": {Scheduled: txboxui.InspectScheduled(f.in), Cancel: f.ob.CancelNoTx, AllowedHosts: []string{"dash.internal"}},
	} {
		h, err := txboxui.New(cfg)
		testenv.Must(t, err, "txboxui.New")
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr, req.Host = "127.0.0.1:4444", "127.0.0.1"
		if name == "not on loop" {
			req.RemoteAddr, req.Host = "192.0.2.7:4444", "dash.internal"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `class="danger cancel"`) || !strings.Contains(rec.Body.String(), `id="scheduled"`) {
			t.Errorf("%s: page %d, Cancel button shown %v", name, rec.Code, strings.Contains(rec.Body.String(), `class="danger cancel"`))
		}
		req = httptest.NewRequest("POST", "/scheduled/cancel", strings.NewReader("id=now-1"))
		req.Header.Set("Content-Type", ct)
		req.RemoteAddr, req.Host = "127.0.0.1:4444", "127.0.0.1"
		if name == "not on loop" {
			req.RemoteAddr, req.Host = "192.0.2.7:4444", "dash.internal"
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden {
			t.Errorf("%s: cancel %d %s, want 403", name, rec.Code, rec.Body.String())
		}
	}
	if ids := f.remaining(t); len(ids) != 3 {
		t.Errorf("a refused cancel discarded a row: %v left", ids)
	}
}

// scheduledPage is what drive_scheduled.js reads off the page.
type scheduledPage struct {
	Count string
	Rows  []struct {
		Seq   int64
		Cells []string
		Due   string
	}
	Scheduled *int64 `json:"scheduled_card"`
	Flash     string
}

// In headless Chromium: the scheduled messages show apart from pending
// with their due times; Cancel (after the confirm dialog) on one that was
// delivered meanwhile says so, on the other discards it.
func TestScheduledCancelInBrowser(t *testing.T) {
	chromium, node := browserTools(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newSchedFixture(t)
	const token = "sched-browser-t0ken"
	h, err := txboxui.New(txboxui.Config{Title: "reminders", Backlog: txboxui.InspectBacklog(f.in), Scheduled: txboxui.InspectScheduled(f.in),
		Cancel: f.ob.CancelNoTx, Token: token, Interval: 200 * time.Millisecond})
	testenv.Must(t, err, "txboxui.New")
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	out := artifacts(t)
	br := startDrive(ctx, t, node, "drive_scheduled.js", "UI_URL="+srv.URL+"/ui/", "UI_TOKEN="+token, "UI_OUT="+out, "CHROMIUM="+chromium)
	var before scheduledPage
	br.step("LISTED", &before)
	if len(before.Rows) != 2 || num(before.Scheduled) != 2 {
		t.Fatalf("the page lists %+v, scheduled card %d; want sched-a and sched-b, 2", before.Rows, num(before.Scheduled))
	}
	for i, id := range []string{"sched-a", "sched-b"} {
		r := before.Rows[i]
		if r.Cells[1] != id || r.Due != f.due[id].UTC().Format(time.RFC3339) || r.Cells[4] != f.due[id].UTC().Format("2006-01-02 15:04:05Z") {
			t.Errorf("row %d %+v, want %s due %s", i, r, id, f.due[id].UTC().Format(time.RFC3339))
		}
	}
	if before.Rows[1].Cells[3] != "<k&1>" {
		t.Errorf("sched-b's key shows as %q", before.Rows[1].Cells[3])
	}
	// sched-b is delivered before its Cancel is clicked.
	_, err = f.pool.Exec(ctx, "UPDATE txbox_outbox SET published_at = now() WHERE message_id = 'sched-b'")
	testenv.Must(t, err, "publish sched-b")
	br.send("sched-b")
	var late scheduledPage
	br.step("CANCELLED", &late)
	if !strings.Contains(late.Flash, "already delivered") {
		t.Errorf("after a cancel of a delivered message the page says %q", late.Flash)
	}
	br.send("sched-a")
	var done scheduledPage
	br.step("CANCELLED", &done)
	br.wait()
	if !strings.Contains(done.Flash, "Cancelled the scheduled message") || len(done.Rows) != 0 {
		t.Errorf("after the cancel: flash %q, rows %+v", done.Flash, done.Rows)
	}
	if ids := f.remaining(t); strings.Join(ids, ",") != "sched-b,now-1,came-1" {
		t.Errorf("rows left %v, want sched-b (delivered), now-1, came-1", ids)
	}
	t.Logf("screenshot: %s", filepath.Join(out, "scheduled.png"))
}
