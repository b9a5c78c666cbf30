// Package ui_test drives the web dashboard (package txboxui) in a real
// browser, Debian's headless Chromium through npm playwright-core, against
// PostgreSQL and NATS; and checks its auth and CSRF rules over plain HTTP.
package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxui"
)

// rejectAll refuses every message: with MaxAttempts 1, what it is given
// dies.
type rejectAll struct{}

func (rejectAll) Publish(_ context.Context, msgs []txbox.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = txbox.Reject(errors.New("schema <v2> refused by the test"))
	}
	return errs
}

// fixture is a PostgreSQL outbox with a backlog, one dead message parking
// one later message of its key, and an inbox with receipts of two sources.
type fixture struct {
	drv     *txboxpgx.Driver
	in      *inspect.Inspector
	letters *dead.Letters
	ib      *inbox.Inbox[pgx.Tx]
	poison  int64 // the dead message's seq
	// cc is a claim check table of three payloads (6000 bytes): one not
	// released, one released ten days ago (the next sweep's), one an
	// hour ago.
	cc *claimcheck.Store
}

const poisonKey = `acct-<b>7</b>`

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pool, _ := testenv.Postgres(t, 8)
	drv := txboxpgx.New(pool)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{"ui_inbox"}, ClaimCheckTables: []string{"ui_claims"}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")

	_, err = ob.AddNoTx(ctx, txbox.Message{ID: "poison-1", Topic: "ev.orders", Key: poisonKey, Payload: []byte(`{"v":1}`)})
	testenv.Must(t, err, "add poison")
	killer, err := relay.New[pgx.Tx](drv, rejectAll{}, relay.Config{MaxAttempts: 1})
	testenv.Must(t, err, "relay.New")
	_, err = killer.Round(ctx)
	testenv.Must(t, err, "round")
	msgs := []txbox.Message{{ID: "parked-1", Topic: "ev.orders", Key: poisonKey, Payload: []byte(`{}`)}}
	for i := range 4 {
		msgs = append(msgs, txbox.Message{ID: "order-" + strconv.Itoa(i), Topic: "ev.orders", Payload: []byte(`{}`)})
	}
	for i := range 2 {
		msgs = append(msgs, txbox.Message{ID: "ship-" + strconv.Itoa(i), Topic: "ev.shipments", Payload: []byte(`{}`)})
	}
	_, err = ob.AddNoTx(ctx, msgs...)
	testenv.Must(t, err, "add backlog")

	f := &fixture{drv: drv}
	f.in, err = inspect.New[pgx.Tx](drv, txbox.Config{})
	testenv.Must(t, err, "inspect.New")
	f.letters, err = dead.New[pgx.Tx](drv, txbox.Config{})
	testenv.Must(t, err, "dead.New")
	list, err := f.letters.List(ctx, 10)
	testenv.Must(t, err, "dead list")
	if len(list) != 1 || list[0].ID != "poison-1" || list[0].Parked != 1 {
		t.Fatalf("dead messages %+v, want poison-1 parking 1", list)
	}
	f.poison = list[0].Seq

	f.ib, err = inbox.New[pgx.Tx](drv, inbox.Config{Table: "ui_inbox"})
	testenv.Must(t, err, "inbox.New")
	for _, r := range [][2]string{{"orders-svc", "a"}, {"orders-svc", "b"}, {"billing", "c"}} {
		_, err := f.ib.Handle(ctx, r[0], r[1], nil, func(context.Context, pgx.Tx) error { return nil })
		testenv.Must(t, err, "inbox handle")
	}
	f.cc, err = claimcheck.New(drv, claimcheck.Config{Table: "ui_claims"})
	testenv.Must(t, err, "claimcheck.New")
	_, err = pool.Exec(ctx, `INSERT INTO ui_claims (ref, payload, created_at, released_at) VALUES
		('cc-a', $1, now(), NULL), ('cc-b', $2, now() - interval '11 days', now() - interval '10 days'), ('cc-c', $3, now(), now() - interval '1 hour')`,
		make([]byte, 3000), make([]byte, 2000), make([]byte, 1000))
	testenv.Must(t, err, "insert claim check payloads")
	return f
}

// artifacts is where the screenshots go: $TXBOX_ARTIFACTS/ui when set
// (kept), else the test's temporary directory.
func artifacts(t *testing.T) string {
	if d := os.Getenv("TXBOX_ARTIFACTS"); d != "" {
		dir := filepath.Join(d, "ui")
		testenv.Must(t, os.MkdirAll(dir, 0o755), "mkdir %s", dir)
		return dir
	}
	return t.TempDir()
}

// browserTools returns Chromium's and node's paths, installing the npm
// dependencies when missing; it skips (fails under CI=true) when one is
// not installed.
func browserTools(t *testing.T) (chromium, node string) {
	t.Helper()
	missing := func(what string, err error) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is needed for the browser test and CI=true: %v", what, err)
		}
		t.Skipf("%s is missing, skipping the browser test (apt-get install -y chromium chromium-driver nodejs npm): %v", what, err)
	}
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		missing("Chromium", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node", err)
	}
	if _, err := os.Stat(filepath.Join("browser", "node_modules", "playwright-core")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			missing("npm", err)
		}
		cmd := exec.Command(npm, "ci", "--prefer-offline", "--no-audit", "--no-fund")
		cmd.Dir = "browser"
		cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			missing("npm ci of tests/ui/browser", errors.New(err.Error()+": "+string(out)))
		}
	}
	return chromium, node
}

// figures is what drive.js reads off the page.
type figures struct {
	Pending, Retrying, Parked, Dead *int64
	ParkedKeysJSON                  *int64 `json:"parked_keys"`
	OldestText                      string `json:"oldest_claimable_text"`
	DeadRows                        []struct {
		Seq   int64
		Cells []string
	} `json:"dead_rows"`
	ParkedRows [][]string `json:"parked_rows"`
	Topics     [][]string
	InboxRows  [][]string `json:"inbox_rows"`
	ClaimCheck [][]string `json:"claimcheck_rows"`
	Relays     [][]string
	Flash      string
	Offsite    []string `json:"offsite_requests"`
}

func num(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// The page, loaded in headless Chromium, shows the figures the Go API
// reads; its Redrive button makes the dead message pending, and a relay
// then delivers it to NATS.
func TestDashboardInBrowser(t *testing.T) {
	chromium, node := browserTools(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t)

	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream := strings.ToUpper(testenv.Name("UI"))
	_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>"}})
	testenv.Must(t, err, "stream")
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	deliverer, err := relay.New[pgx.Tx](f.drv, pub, relay.Config{PollInterval: 100 * time.Millisecond})
	testenv.Must(t, err, "relay.New")
	var current atomic.Pointer[relay.Relay]

	const token = "t0ken-for-the-test"
	h, err := txboxui.New(txboxui.Config{
		Title:       "orders outbox",
		Backlog:     txboxui.InspectBacklog(f.in),
		Dead:        f.letters,
		Inboxes:     []txboxui.InboxRef{{Name: "ui_inbox", Stats: f.ib.Stats}},
		ClaimChecks: []txboxui.ClaimCheckRef{txboxui.StoreClaimCheck("ui_claims", f.cc, 168*time.Hour)},
		Relays:      []txboxui.RelayRef{{Name: "relay-1", Current: current.Load}},
		Token:       token,
		Interval:    200 * time.Millisecond,
	})
	testenv.Must(t, err, "txboxui.New")
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// What the Go API says, read before the page (nothing moves until the
	// redrive: no relay runs).
	want, err := f.in.Backlog(ctx)
	testenv.Must(t, err, "inspect backlog")
	if want.Pending != 6 || want.Parked != 1 || want.Dead != 1 || want.ParkedKeys != 1 {
		t.Fatalf("fixture backlog %+v", want)
	}
	stats, err := f.ib.Stats(ctx)
	testenv.Must(t, err, "inbox stats")

	out := artifacts(t)
	br := startDrive(ctx, t, node, "drive.js", "UI_URL="+srv.URL+"/ui/", "UI_TOKEN="+token, "UI_SEQ="+strconv.FormatInt(f.poison, 10), "UI_OUT="+out, "CHROMIUM="+chromium)
	step := func(name string) (fg figures) {
		t.Helper()
		br.step(name, &fg)
		return fg
	}

	before := step("FIGURES")
	if num(before.Pending) != want.Pending || num(before.Retrying) != want.Retrying || num(before.Parked) != want.Parked ||
		num(before.Dead) != want.Dead || num(before.ParkedKeysJSON) != want.ParkedKeys {
		t.Errorf("page shows pending %d retrying %d parked %d dead %d parked keys %d; inspect.Backlog %+v",
			num(before.Pending), num(before.Retrying), num(before.Parked), num(before.Dead), num(before.ParkedKeysJSON), want)
	}
	if len(before.Topics) != len(want.Topics) {
		t.Errorf("page topics %v, inspect %v", before.Topics, want.Topics)
	}
	for i, tc := range want.Topics {
		if i < len(before.Topics) && (before.Topics[i][0] != tc.Topic || before.Topics[i][1] != strconv.FormatInt(tc.Undelivered, 10)) {
			t.Errorf("topic row %d %v, inspect %+v", i, before.Topics[i], tc)
		}
	}
	if len(before.DeadRows) != 1 || before.DeadRows[0].Seq != f.poison || before.DeadRows[0].Cells[1] != "poison-1" ||
		before.DeadRows[0].Cells[3] != poisonKey || !strings.Contains(before.DeadRows[0].Cells[7], "schema <v2> refused") {
		t.Errorf("dead rows %+v (the key and error must show as text, escaped)", before.DeadRows)
	}
	if len(before.ParkedRows) != 1 || before.ParkedRows[0][0] != poisonKey || before.ParkedRows[0][3] != "1" {
		t.Errorf("parked keys %v", before.ParkedRows)
	}
	if len(before.InboxRows) != len(stats) {
		t.Errorf("inbox rows %v, Stats %+v", before.InboxRows, stats)
	}
	for i, s := range stats {
		if i < len(before.InboxRows) {
			got := before.InboxRows[i]
			if got[0] != s.Source || got[1] != strconv.FormatInt(s.Total, 10) || got[2] != strconv.FormatInt(s.Processed, 10) {
				t.Errorf("inbox row %v, Stats %+v", got, s)
			}
		}
	}
	// The claim check panel: what claimcheck.Store.Stats reads.
	cst, err := f.cc.Stats(ctx, 168*time.Hour)
	testenv.Must(t, err, "claim check stats")
	if cst.Payloads != 3 || cst.Bytes != 6000 || cst.Unreleased != 1 || cst.Due != 1 || cst.DueBytes != 2000 || cst.OldestAge < 11*24*time.Hour {
		t.Errorf("claimcheck.Store.Stats %+v, want 3 payloads of 6000 bytes, 1 not released, 1 due of 2000 bytes, the oldest 11 days old", cst)
	}
	if len(before.ClaimCheck) != 1 {
		t.Errorf("claim check rows %v, want one (ui_claims)", before.ClaimCheck)
	} else if got := before.ClaimCheck[0]; len(got) != 7 || got[0] != "3" || got[1] != "6000" || !strings.HasPrefix(got[2], "11d") ||
		got[3] != "1" || got[4] != "1" || got[5] != "2000" || got[6] != "7d0h" {
		t.Errorf("claim check row %q, want stored 3, bytes 6000, oldest 11d…, not released 1, next sweep 1 of 2000 bytes, retention 7d", got)
	}
	if len(before.Relays) != 1 || before.Relays[0][1] != "not running" {
		t.Errorf("relays %v, want relay-1 not running", before.Relays)
	}
	if len(before.Offsite) > 0 {
		t.Errorf("the page requested other origins: %v", before.Offsite)
	}

	redrove := step("REDROVE")
	if !strings.Contains(redrove.Flash, "Redrove 1 dead message") || num(redrove.Dead) != 0 {
		t.Errorf("after the click: flash %q, dead %d", redrove.Flash, num(redrove.Dead))
	}
	list, err := f.letters.List(ctx, 10)
	testenv.Must(t, err, "dead list")
	if len(list) != 0 {
		t.Fatalf("after redrive, dead messages %+v", list)
	}

	// A relay now delivers the redriven message (and the rest) to NATS.
	testenv.Must(t, deliverer.Start(ctx), "relay start")
	defer func() { _ = deliverer.Stop(context.Background()) }()
	current.Store(deliverer)
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "consumer")
	got := map[string]string{}
	for len(got) < 8 {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		testenv.Must(t, err, "read the stream (have %v)", got)
		id := m.Headers().Get(txbox.HeaderMessageID)
		if id == "" {
			id = m.Headers().Get("Nats-Msg-Id")
		}
		got[id] = m.Subject()
	}
	if got["poison-1"] != prefix+"ev.orders" {
		t.Errorf("the redriven message was not delivered to %sev.orders: %v", prefix, got)
	}

	after := step("AFTER")
	br.wait()
	if num(after.Pending) != 0 || num(after.Parked) != 0 || num(after.Dead) != 0 || len(after.Relays) != 1 || after.Relays[0][1] != "ready" {
		t.Errorf("after delivery the page shows pending %d parked %d dead %d relays %v", num(after.Pending), num(after.Parked), num(after.Dead), after.Relays)
	}
	t.Logf("screenshots: %s and %s", filepath.Join(out, "dashboard-before.png"), filepath.Join(out, "dashboard-after.png"))
}
