package txboxmigrate

import (
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox/txboxdriver"
)

func TestPlanRendersNames(t *testing.T) {
	ms, err := Plan(txboxdriver.Postgres, Config{Schema: "s1", OutboxTable: "events"})
	if err != nil {
		t.Fatal(err)
	}
	script, err := UpScript(txboxdriver.Postgres, "s1", ms, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE TABLE "s1"."events"`, `CREATE INDEX "events_pending_idx" ON "s1"."events"`,
		`CREATE FUNCTION "s1"."events_key_order"()`, `CREATE TRIGGER "events_key_order" BEFORE INSERT ON "s1"."events"`} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %s:\n%s", want, script)
		}
	}
	if strings.Contains(script, "{{") {
		t.Errorf("unexpanded placeholder:\n%s", script)
	}
	stmts := splitStatements(ms[0].SQL)
	i := slices.IndexFunc(stmts, func(s string) bool { return strings.HasPrefix(s, `CREATE FUNCTION "s1"."events_key_order"`) })
	if i < 0 || i+1 >= len(stmts) || !strings.HasSuffix(stmts[i], "$$") || !strings.HasPrefix(stmts[i+1], "CREATE TRIGGER") {
		t.Fatalf("the function body was split: %q", stmts)
	}
	if _, err := Plan(txboxdriver.SQLite, Config{Schema: "s1"}); err == nil {
		t.Error("a schema on SQLite was accepted")
	}
	if _, err := Plan(txboxdriver.Postgres, Config{OutboxTable: "a-b"}); err == nil {
		t.Error("an invalid table name was accepted")
	}
}
