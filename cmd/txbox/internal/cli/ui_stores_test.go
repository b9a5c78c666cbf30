package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// txbox ui with --db repeated serves several stores, a PostgreSQL schema
// and a SQLite file, behind one token: the list at / names both with their
// backlogs, /?store=NAME leads to a store's dashboard, and each store's
// /store/N/api/state shows its own table's figures (txbox stats') and its
// inbox; the token is never printed. A repeated --db naming one table twice
// is refused.
func TestUIServesSeveralStores(t *testing.T) {
	t.Parallel()
	admin, schema := pgSchema(t)
	pgURL := testenv.PostgresURL()
	sep := "?"
	if strings.Contains(pgURL, "?") {
		sep = "&"
	}
	pgURL += sep + "search_path=" + schema
	dir := t.TempDir()
	liteURL := "sqlite://" + filepath.Join(dir, "x.db")
	mustRun(t, "migrate", "up", "--db", testenv.PostgresURL(), "--schema", schema, "--inbox-table", "orders_inbox")
	mustRun(t, "migrate", "up", "--db", liteURL, "--inbox-table", "orders_inbox")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.txbox_outbox (message_id, topic, payload, attempts, last_error, dead_at) VALUES
		('p1', 'd', '\x00', 10, 'refused', now()), ('p2', 't', '\x00', 0, NULL, NULL), ('p3', 't', '\x00', 0, NULL, NULL)`)
	testenv.Must(t, err, "insert into PostgreSQL")
	lite, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "x.db")))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = lite.Close() })
	_, err = lite.Exec(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, headers, attempts, last_error, next_attempt_at, dead_at) VALUES
		('s1', 'd', NULL, x'00', '{}', 10, 'refused', NULL, 1), ('s2', 'd', NULL, x'00', '{}', 10, 'refused', NULL, 1),
		('s3', 't', NULL, x'00', '{}', 0, NULL, NULL, NULL)`)
	testenv.Must(t, err, "insert into SQLite")
	type backlog struct{ Pending, Dead int64 }
	stats := func(db string) backlog {
		var b backlog
		testenv.Must(t, json.Unmarshal([]byte(mustRun(t, "stats", "--json", "--db", db)), &b), "stats --json")
		return b
	}
	want := []backlog{stats(pgURL), stats(liteURL)}
	if want[0] != (backlog{Pending: 2, Dead: 1}) || want[1] != (backlog{Pending: 1, Dead: 2}) {
		t.Fatalf("txbox stats: %+v", want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	addr := ln.Addr().String()
	// (--http in use: a ui that took the --db's as one would fail there.)
	if _, _, err := run(ctx, "ui", "--db", liteURL, "--db", "sqlite://"+dir+"/./x.db", "--http", addr); err == nil || !strings.Contains(err.Error(), "same table") {
		t.Fatalf("ui with one table twice: %v, want a refusal naming the same table", err)
	}
	_ = ln.Close()
	const token = "ui-s3cret-token"
	uctx, ucancel := context.WithCancel(ctx)
	defer ucancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(uctx, []string{"ui", "--db", pgURL, "--db", liteURL, "--http", addr, "--token", token,
			"--inbox-table", "orders_inbox", "--interval", "100ms"}, &out, &errOut)
	}()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (int, string, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
		req.SetBasicAuth("me", token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Location")
	}
	var list string
	for {
		code, body, _ := get("/")
		if code == http.StatusOK {
			list = body
			break
		}
		select {
		case err := <-done:
			t.Fatalf("txbox ui exited: %v\n%s", err, errOut.String())
		case <-ctx.Done():
			t.Fatalf("txbox ui never served: %s", errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	names := []string{"127.0.0.1:5432/test", filepath.Join(dir, "x.db")}
	if u := testenv.PostgresURL(); !strings.Contains(u, "127.0.0.1:5432/test") {
		names[0] = ""
	}
	for _, name := range names {
		if name != "" && !strings.Contains(list, name) {
			t.Errorf("the list of stores lacks %q:\n%s", name, list)
		}
	}
	if code, _, loc := get("/?store=" + filepath.Join(dir, "x.db")); code != http.StatusSeeOther || loc != "store/1/" {
		t.Errorf("/?store=<the SQLite store>: %d to %q, want 303 to store/1/", code, loc)
	}
	for i, w := range want {
		code, body, _ := get("/store/" + string(rune('0'+i)) + "/api/state")
		var st struct {
			Title   string
			Inboxes []struct{ Name string }
			Backlog backlog
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Backlog != w ||
			len(st.Inboxes) != 1 || st.Inboxes[0].Name != "orders_inbox" {
			t.Errorf("store %d api/state: %d %s; want backlog %+v and inbox orders_inbox", i, code, body, w)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/store/0/", nil)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a store's page without the token: %v %v, want 401", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	ucancel()
	if err := <-done; err != nil {
		t.Fatalf("txbox ui: %v\n%s", err, errOut.String())
	}
	if strings.Contains(errOut.String()+out.String(), token) {
		t.Errorf("the token was printed:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "stores=2") {
		t.Errorf("the log does not say it serves 2 stores:\n%s", errOut.String())
	}
}
