package cli_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
