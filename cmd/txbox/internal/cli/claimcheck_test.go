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
// txbox claimcheck sweep deletes the payloads stored before --retention,
// keeping the newer ones.
func TestClaimCheckSweep(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cc.db")
	db := "sqlite://" + path
	out := mustRun(t, "migrate", "up", "--db", db, "--no-outbox", "--claim-check-table", "txbox_claim_check")
	if !strings.Contains(out, "claimcheck:txbox_claim_check") {
		t.Fatalf("migrate up --claim-check-table:\n%s", out)
	}
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	defer conn.Close()
	day := (24 * time.Hour).Microseconds()
	now := time.Now().UnixMicro()
	_, err = conn.Exec(`INSERT INTO txbox_claim_check (ref, payload, created_at) VALUES ('old', x'00', ?1), ('new', x'01', ?2)`, now-10*day, now)
	testenv.Must(t, err, "insert")
	out = mustRun(t, "claimcheck", "sweep", "--db", db, "--retention", "168h")
	if strings.TrimSpace(out) != "swept 1 payload(s)" {
		t.Fatalf("claimcheck sweep: %q", out)
	}
	var refs []string
	rows, err := conn.Query("SELECT ref FROM txbox_claim_check")
	testenv.Must(t, err, "query")
	for rows.Next() {
		var r string
		testenv.Must(t, rows.Scan(&r), "scan")
		refs = append(refs, r)
	}
	testenv.Must(t, rows.Err(), "rows")
	if len(refs) != 1 || refs[0] != "new" {
		t.Fatalf("left %v, want [new]", refs)
	}
	if _, _, err := run(t.Context(), "claimcheck", "sweep", "--db", db, "--retention", "0s"); err == nil {
		t.Fatalf("--retention 0s was accepted")
	}
}
