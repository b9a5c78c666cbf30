package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxui"
)

// storesSite is a txboxui.Stores over two stores: acme (PostgreSQL, with
// its inbox, an in-process relay that does not run and a relay in another
// process read from its /readyz) and globex, whose database is not open.
func storesSite(t *testing.T, token string) (*httptest.Server, *fixture) {
	t.Helper()
	f := newFixture(t)
	remote := httptest.NewServer(health.Handler(nil, health.RelayCheck("relay", func() *relay.Relay { return nil })))
	t.Cleanup(remote.Close)
	var s *txboxui.Stores
	var once sync.Once
	var acme *txboxui.Handler
	var acmeErr error
	s, err := txboxui.NewStores(txboxui.StoresConfig{Title: "txbox relay", Token: token, Stores: func() []txboxui.StoreRef {
		return []txboxui.StoreRef{
			{Name: "acme", Open: func() (*txboxui.Handler, error) {
				once.Do(func() {
					acme, acmeErr = s.New(txboxui.Config{
						Title: "acme", Backlog: txboxui.InspectBacklog(f.in), Dead: f.letters,
						Inboxes: []txboxui.InboxRef{{Name: "ui_inbox", Stats: f.ib.Stats}},
						Relays: []txboxui.RelayRef{{Name: "relay-acme", Current: func() *relay.Relay { return nil }},
							{Name: "elsewhere", Readyz: remote.URL + "/readyz"}},
						Interval: 200 * time.Millisecond,
					})
				})
				return acme, acmeErr
			}},
			{Name: "globex", Open: func() (*txboxui.Handler, error) { return nil, errors.New("waiting for its database") }},
		}
	}})
	testenv.Must(t, err, "txboxui.NewStores")
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", s))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, f
}

// TestStoresDashboardAccess: the list and every store's pages pass one
// token check (401 without it, on the list, a store's page, its API and
// its actions); a store that is not open answers 503 with why; a store's
// dashboard made by another Stores (or none) is refused.
func TestStoresDashboardAccess(t *testing.T) {
	t.Parallel()
	const token = "t0ken-for-the-stores-test"
	srv, _ := storesSite(t, token)
	c := client{t: t, base: srv.URL + "/ui"}
	for _, p := range []string{"/", "/store/0/", "/store/0/api/state", "/store/0/dlq", "/assets/style.css"} {
		if code, _ := c.do(http.MethodGet, p, nil, nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", p, code)
		}
	}
	if code, _ := c.do(http.MethodPost, "/store/0/dead/redrive", strings.NewReader("all=1"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); code != http.StatusUnauthorized {
		t.Errorf("POST a redrive without the token: %d, want 401", code)
	}
	auth := map[string]string{"Authorization": "Bearer " + token}
	code, list := c.do(http.MethodGet, "/", nil, auth)
	if code != http.StatusOK || !strings.Contains(list, `data-name="acme"`) || !strings.Contains(list, "unavailable: waiting for its database") {
		t.Fatalf("the list: %d\n%s", code, list)
	}
	if code, page := c.do(http.MethodGet, "/store/1/", nil, auth); code != http.StatusServiceUnavailable || !strings.Contains(page, "waiting for its database") {
		t.Fatalf("globex's page: %d %q, want 503 saying why", code, page)
	}
	if code, _ := c.do(http.MethodGet, "/store/2/", nil, auth); code != http.StatusNotFound {
		t.Fatalf("a third store: %d, want 404", code)
	}

	other, err := txboxui.New(txboxui.Config{})
	testenv.Must(t, err, "txboxui.New")
	s, err := txboxui.NewStores(txboxui.StoresConfig{Stores: func() []txboxui.StoreRef {
		return []txboxui.StoreRef{{Name: "stray", Open: func() (*txboxui.Handler, error) { return other, nil }}}
	}})
	testenv.Must(t, err, "txboxui.NewStores")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/store/0/", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "not made by this Stores") {
		t.Fatalf("a store's dashboard made by txboxui.New: %d %q, want 503", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://evil.example/", nil))
	if rec.Code != http.StatusMisdirectedRequest {
		t.Fatalf("a Host that is not loopback, without a token: %d, want 421", rec.Code)
	}
}

// TestStoresDashboardInBrowser: in headless Chromium, the dashboard of
// several stores lists them with their backlogs (a store whose database is
// not open says so), opens one store's dashboard with its relay panel (the
// in-process relay and one read from another process's /readyz) and its
// inbox panel, redrives its dead message there and links back to the
// list.
func TestStoresDashboardInBrowser(t *testing.T) {
	chromium, node := browserTools(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const token = "t0ken-for-the-stores-test"
	srv, f := storesSite(t, token)
	want, err := f.in.Backlog(ctx)
	testenv.Must(t, err, "inspect backlog")
	stats, err := f.ib.Stats(ctx)
	testenv.Must(t, err, "inbox stats")

	br := startDrive(ctx, t, node, "drive_stores.js", "UI_URL="+srv.URL+"/ui/", "UI_TOKEN="+token, "UI_STORE=acme", "CHROMIUM="+chromium)
	type list struct {
		Stores []struct {
			Name  string
			Cells []string
		}
	}
	var l list
	br.step("LIST", &l)
	if len(l.Stores) != 2 || l.Stores[0].Name != "acme" || l.Stores[1].Name != "globex" {
		t.Fatalf("the list shows %+v, want acme and globex", l)
	}
	if c := l.Stores[0].Cells; len(c) < 5 || c[1] != itoa(want.Pending) || c[3] != itoa(want.Parked) || c[4] != itoa(want.Dead) {
		t.Errorf("acme's row %v, inspect.Backlog %+v", c, want)
	}
	if c := l.Stores[1].Cells; len(c) != 2 || !strings.Contains(c[1], "waiting for its database") {
		t.Errorf("globex's row %v, want it unavailable, waiting for its database", c)
	}
	var st struct {
		Title     string
		Relays    [][]string
		InboxRows [][]string `json:"inbox_rows"`
		DeadRows  [][]string `json:"dead_rows"`
		Flash     string
	}
	br.step("STORE", &st)
	if st.Title != "acme" || len(st.DeadRows) != 1 {
		t.Errorf("the store page: title %q, dead rows %v; want acme with one dead row", st.Title, st.DeadRows)
	}
	names := []string{}
	for _, r := range st.Relays {
		names = append(names, r[0])
	}
	if !slices.Equal(names, []string{"relay-acme", "elsewhere"}) || st.Relays[0][1] != "not running" || st.Relays[1][1] != "not running" {
		t.Errorf("the relay panel %v, want relay-acme and elsewhere (read from its /readyz), neither running", st.Relays)
	}
	if len(st.InboxRows) != len(stats) {
		t.Errorf("the inbox panel %v, Stats %+v", st.InboxRows, stats)
	}
	br.step("REDROVE", &st)
	if !strings.Contains(st.Flash, "Redrove 1 dead message(s).") || len(st.DeadRows) != 0 {
		t.Errorf("after the redrive: flash %q, dead rows %v", st.Flash, st.DeadRows)
	}
	br.step("BACK", &l)
	if len(l.Stores) != 2 || l.Stores[0].Cells[4] != "0" {
		t.Errorf("back on the list: %+v, want acme with 0 dead", l)
	}
	br.wait()
}
