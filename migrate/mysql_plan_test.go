package migrate

import (
	"strings"
	"testing"

	"github.com/txbox/txbox/driver"
)

// The MySQL trigger's BEGIN … END body is one statement; the rest splits
// on semicolons as before.
func TestPlanMySQLSplitsTriggerAsOneStatement(t *testing.T) {
	ms, err := Plan(driver.MySQL, Config{OutboxTable: "events", InboxTables: []string{"inbox"}})
	if err != nil {
		t.Fatal(err)
	}
	script, err := UpScript(driver.MySQL, "", ms, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS `events`", "CREATE TABLE IF NOT EXISTS `events_keys`",
		"CREATE TRIGGER IF NOT EXISTS `events_key_order` BEFORE INSERT ON `events`", "INDEX `events_pending_idx`", "CREATE TABLE IF NOT EXISTS `inbox`"} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %s", want)
		}
	}
	if strings.Contains(script, "{{") {
		t.Errorf("unexpanded placeholder:\n%s", script)
	}
	stmts := splitStatements(ms[1].SQL)
	if len(stmts) != 3 || !strings.HasPrefix(stmts[2], "CREATE TRIGGER") || !strings.HasSuffix(stmts[2], "END") || strings.Count(stmts[2], ";") < 3 {
		t.Fatalf("key-order migration split into %d statements: %q", len(stmts), stmts)
	}
	if _, err := Plan(driver.MySQL, Config{Schema: "s"}); err == nil {
		t.Error("a schema on MySQL was accepted")
	}
}
