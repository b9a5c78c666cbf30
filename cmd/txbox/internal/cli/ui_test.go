package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// txbox ui refuses an address other than loopback without a token, before
// it opens anything.
func TestUIRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Setenv(cli.EnvUIToken, "")
	db := "sqlite://" + filepath.Join(t.TempDir(), "missing.db")
	for _, addr := range []string{"0.0.0.0:0", ":8080", "192.0.2.1:8080"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _, err := run(ctx, "ui", "--db", db, "--http", addr)
		cancel()
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "--token") {
			t.Errorf("--http %s: %v, want an invalid-config error naming --token", addr, err)
		}
	}
}

// txbox ui serves the dashboard of a migrated database, behind its token,
// with the inbox tables asked for; the token is never printed.
func TestUIServesDashboard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "x.db")
	mustRun(t, "migrate", "up", "--db", db, "--inbox-table", "orders_inbox")
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "x.db")))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.Exec(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, headers, attempts, last_error, next_attempt_at, dead_at) VALUES
		('m1', 'd', 'K', x'00', '{}', 10, 'refused', NULL, 1),
		('m2', 't', 'K', x'00', '{}', 0, NULL, NULL, NULL),
		('m3', 'f', NULL, x'00', '{}', 2, 'nope', 9999999999999999, NULL),
		('m4', 'u', NULL, x'00', '{}', 0, NULL, NULL, NULL),
		('m5', 's', NULL, x'00', '{}', 0, NULL, 9999999999999999, NULL)`)
	testenv.Must(t, err, "insert")
	var stats struct {
		Pending, Retrying, Parked, Dead, Undelivered int64
		ParkedKeys                                   int64 `json:"parked_keys"`
	}
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, "stats", "--json", "--db", db)), &stats), "stats --json")
	if stats.Pending != 2 || stats.Retrying != 1 || stats.Parked != 1 || stats.Dead != 1 {
		t.Fatalf("stats --json %+v", stats)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	addr := ln.Addr().String()
	_ = ln.Close()
	const token = "ui-s3cret-token"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, []string{"ui", "--db", db, "--http", addr, "--token", token, "--inbox-table", "orders_inbox", "--interval", "100ms"}, &out, &errOut)
	}()
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
		if tok != "" {
			req.SetBasicAuth("me", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Await(t, "txbox ui serving /", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("txbox ui exited: %v\n%s", err, errOut.String())
		default:
		}
		code, _ := get("/", token)
		return code == http.StatusOK, fmt.Sprintf("GET / %d\nstderr:\n%s", code, errOut.String())
	})
	if code, _ := get("/", ""); code != http.StatusUnauthorized {
		t.Errorf("GET / without the token: %d, want 401", code)
	}
	code, body := get("/api/state", token)
	var st struct {
		Title   string
		Inboxes []struct{ Name string }
		HasDead bool `json:"has_dead"`
		Backlog struct {
			Pending, Retrying, Parked, Dead, Undelivered int64
			ParkedKeys                                   int64 `json:"parked_keys"`
		}
		Dead         []struct{ ID string }
		HasScheduled bool `json:"has_scheduled"`
		Scheduled    []struct {
			ID    string
			DueAt time.Time `json:"due_at"`
		}
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Title != "txbox_outbox" || !st.HasDead ||
		len(st.Inboxes) != 1 || st.Inboxes[0].Name != "orders_inbox" || len(st.Dead) != 1 || st.Dead[0].ID != "m1" {
		t.Errorf("api/state: %d %s", code, body)
	}
	// The scheduled message, listed apart with its due time, and its
	// Cancel button.
	if !st.HasScheduled || len(st.Scheduled) != 1 || st.Scheduled[0].ID != "m5" || !st.Scheduled[0].DueAt.Equal(time.UnixMicro(9999999999999999)) {
		t.Errorf("api/state's scheduled messages: %s", body)
	}
	if _, page := get("/", token); !strings.Contains(page, `<tr class="scheduled"`) || !strings.Contains(page, `name="id" value="m5"`) {
		t.Errorf("the page shows no scheduled message with a Cancel button")
	}
	// The dashboard's figures are txbox stats' figures.
	if st.Backlog != stats {
		t.Errorf("dashboard backlog %+v, txbox stats --json %+v", st.Backlog, stats)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("txbox ui: %v", err)
	}
	if strings.Contains(errOut.String()+out.String(), token) {
		t.Errorf("the token was printed:\n%s", errOut.String())
	}
}
