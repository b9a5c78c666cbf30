package cli_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// txbox migrate up --claim-check-table creates the claim check table, and
// txbox claimcheck sweep deletes the payloads released (their message
// delivered) before --retention, keeping the newer ones and those a row
// still to deliver refers to, whatever their age.
func TestClaimCheckSweep(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cc.db")
	db := "sqlite://" + path
	out := mustRun(t, "migrate", "up", "--db", db, "--claim-check-table", "txbox_claim_check")
	if !strings.Contains(out, "claimcheck:txbox_claim_check") {
		t.Fatalf("migrate up --claim-check-table:\n%s", out)
	}
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	defer conn.Close()
	day := (24 * time.Hour).Microseconds()
	now := time.Now().UnixMicro()
	_, err = conn.Exec(`INSERT INTO txbox_claim_check (ref, payload, created_at, released_at) VALUES
		('old', x'00', ?1, ?1), ('new', x'01', ?1, ?2), ('held', x'02', ?1, ?1)`, now-10*day, now)
	testenv.Must(t, err, "insert")
	_, err = conn.Exec(`INSERT INTO txbox_outbox (topic, payload, headers) VALUES ('t', x'', '{"Txbox-Claim-Check":"held"}')`)
	testenv.Must(t, err, "insert")
	out = mustRun(t, "claimcheck", "sweep", "--db", db, "--retention", "168h")
	if strings.TrimSpace(out) != "swept 1 payload(s)" {
		t.Fatalf("claimcheck sweep: %q", out)
	}
	var refs []string
	rows, err := conn.Query("SELECT ref FROM txbox_claim_check ORDER BY ref")
	testenv.Must(t, err, "query")
	for rows.Next() {
		var r string
		testenv.Must(t, rows.Scan(&r), "scan")
		refs = append(refs, r)
	}
	testenv.Must(t, rows.Err(), "rows")
	if len(refs) != 2 || refs[0] != "held" || refs[1] != "new" {
		t.Fatalf("left %v, want [held new]", refs)
	}
	if _, _, err := run(t.Context(), "claimcheck", "sweep", "--db", db, "--retention", "0s"); err == nil {
		t.Fatalf("--retention 0s was accepted")
	}
}

// txbox relay with TXBOX_CLAIM_CHECK_TABLE sweeps the claim check table
// at each cleanup (every --retention, 1s here): a payload released longer than
// --claim-check-retention ago is deleted; one that a row still to deliver
// refers to is kept (and held again) however long ago it was released; a
// payload no row refers to is released.
func TestRelayClaimCheckSweep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ccr.db")
	db := "sqlite://" + path
	mustRun(t, "migrate", "up", "--db", db, "--claim-check-table", "txbox_claim_check")
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	defer conn.Close()
	day := (24 * time.Hour).Microseconds()
	now := time.Now().UnixMicro()
	_, err = conn.Exec(`INSERT INTO txbox_claim_check (ref, payload, created_at, released_at) VALUES
		('gone', x'00', ?1, ?1), ('kept', x'01', ?1, ?1), ('fresh', x'02', ?1, NULL)`, now-10*day)
	testenv.Must(t, err, "insert")
	prefix := testenv.Subject()
	_, err = conn.Exec(`INSERT INTO txbox_outbox (topic, payload, headers, next_attempt_at) VALUES (?1, x'', '{"txbox-claim-check":"kept"}', ?2)`,
		prefix+"big", now+day)
	testenv.Must(t, err, "insert")

	t.Setenv("TXBOX_CLAIM_CHECK_TABLE", "txbox_claim_check")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	stream := strings.ToUpper(testenv.Name("CCR"))
	js, err := jetstream.New(testenv.NATS(t))
	testenv.Must(t, err, "jetstream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	go func() {
		done <- cli.Run(ctx, []string{"relay", "--db", db, "--broker", testenv.NATSURL(), "--stream", stream, "--stream-subjects", prefix + ">",
			"--retention", "1s", "--claim-check-retention", "1h", "--stats-interval", "100ms"}, &out, &errOut)
	}()
	state := func() (refs []string, released map[string]bool) {
		rows, err := conn.Query("SELECT ref, released_at IS NOT NULL FROM txbox_claim_check ORDER BY ref")
		testenv.Must(t, err, "query")
		defer rows.Close()
		released = map[string]bool{}
		for rows.Next() {
			var ref string
			var rel bool
			testenv.Must(t, rows.Scan(&ref, &rel), "scan")
			refs, released[ref] = append(refs, ref), rel
		}
		testenv.Must(t, rows.Err(), "rows")
		return refs, released
	}
	// The relay prints a stats line every 100ms: the wait fails when it
	// has printed nothing for 30s, whatever the whole takes.
	last, moved := -1, time.Now()
	for {
		refs, released := state()
		if len(refs) == 2 {
			if refs[0] != "fresh" || refs[1] != "kept" || !released["fresh"] || released["kept"] {
				t.Fatalf("after the sweep: %v released %v; want fresh (released) and kept (held again)", refs, released)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("relay exited: %v\nstderr:\n%s", err, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if n := len(out.String()); n != last {
			last, moved = n, time.Now()
		} else if time.Since(moved) > 30*time.Second {
			t.Fatalf("the relay printed nothing for 30s and swept nothing: %v\nstderr:\n%s", refs, errOut.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v\nstderr:\n%s", err, errOut.String())
	}
}
