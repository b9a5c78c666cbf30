package ui_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxui"
)

// rejectWith refuses every message with an error saying msg.
type rejectWith string

func (r rejectWith) Publish(_ context.Context, msgs []txbox.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = txbox.Reject(errors.New(string(r)))
	}
	return errs
}

// What the page shows from the database is escaped beyond HTML: a bidi
// override (U+202E) or an escape sequence in a topic, key, id or error is
// shown as \u202e, \x1b. And a dead message parks its key even while no
// later message of the key waits: the parked-keys card and the list agree.
func TestDashboardEscapesAndParkedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Postgres(t, 4)
	drv := txboxpgx.New(pool)
	migrateOutbox(t, drv)
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	_, err = ob.AddNoTx(ctx, txbox.Message{ID: "id-\u202eevil", Topic: "ev.\u202esredro", Key: "k\u202e1", Payload: []byte(`{}`)})
	testenv.Must(t, err, "add")
	// The table refuses control characters in topics; a broker's error
	// may hold any.
	killer, err := relay.New[pgx.Tx](drv, rejectWith("\x1b[31mred\u202e"), relay.Config{MaxAttempts: 1})
	testenv.Must(t, err, "relay.New")
	_, err = killer.Round(ctx)
	testenv.Must(t, err, "round")
	in, err := inspect.New[pgx.Tx](drv, txbox.Config{})
	testenv.Must(t, err, "inspect.New")
	letters, err := dead.New[pgx.Tx](drv, txbox.Config{})
	testenv.Must(t, err, "dead.New")
	// A claim check source whose error carries markup and control
	// characters (a database's error may quote any value).
	failing := txboxui.ClaimCheckRef{Name: "cc-\u202ename<b>", Retention: time.Hour,
		Stats: func(context.Context) (claimcheck.Stats, error) {
			return claimcheck.Stats{}, errors.New("\x1b[31m<script>boom</script>\u202e")
		}}
	h, err := txboxui.New(txboxui.Config{Backlog: txboxui.InspectBacklog(in), Dead: letters, ClaimChecks: []txboxui.ClaimCheckRef{failing}})
	testenv.Must(t, err, "txboxui.New")
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, page := client{t, srv.URL, ""}.do("GET", "/", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /: %d %s", code, page)
	}
	if strings.ContainsAny(page, "\u202e\x1b") {
		t.Errorf("the page holds a raw U+202E or ESC:\n%s", page)
	}
	for _, want := range []string{`<td>ev.\u202esredro</td>`, `<td>k\u202e1</td>`, `id-\u202eevil`, `\x1b[31mred\u202e`,
		`id="fig-parked-keys" data-value="1"`, `<tr class="parked-key"><td>k\u202e1</td>`,
		`<caption>cc-\u202ename&lt;b&gt;</caption>`, `\x1b[31m&lt;script&gt;boom&lt;/script&gt;\u202e`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(page, "<script>boom") {
		t.Errorf("the page holds the error's markup raw")
	}
	if strings.Contains(page, "No key is parked") {
		t.Errorf("the page says no key is parked beside a parked-keys count of 1")
	}

	// Redriving a seq that is not a dead message is not a success.
	const token = "t0ken"
	h, err = txboxui.New(txboxui.Config{Dead: letters, Token: token})
	testenv.Must(t, err, "txboxui.New")
	api := httptest.NewServer(h)
	defer api.Close()
	list, err := letters.List(ctx, 10)
	testenv.Must(t, err, "dead list")
	bearer := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	c := client{t, api.URL, ""}
	if code, body := c.do("POST", "/api/dead/redrive", strings.NewReader(`{"seqs":[999999]}`), bearer); code != http.StatusNotFound || !strings.Contains(body, `"missed": 1`) {
		t.Errorf("redrive of no dead message: %d %s, want 404 with missed 1", code, body)
	}
	body := fmt.Sprintf(`{"seqs":[%d,999999]}`, list[0].Seq)
	if code, body := c.do("POST", "/api/dead/redrive", strings.NewReader(body), bearer); code != http.StatusOK || !strings.Contains(body, `"count": 1`) || !strings.Contains(body, `"missed": 1`) {
		t.Errorf("redrive of one dead message and one other: %d %s, want 200 with count 1, missed 1", code, body)
	}
}
