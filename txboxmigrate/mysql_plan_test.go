package txboxmigrate

import (
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox/txboxdriver"
)

// The MySQL trigger's BEGIN … END body is one statement; the rest splits
// on semicolons as before.
func TestPlanMySQLSplitsTriggerAsOneStatement(t *testing.T) {
	ms, err := Plan(txboxdriver.MySQL, Config{OutboxTable: "events", InboxTables: []string{"inbox"}})
	if err != nil {
		t.Fatal(err)
	}
	script, err := UpScript(txboxdriver.MySQL, "", ms, ScriptOptions{})
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
	stmts := splitStatements(ms[0].SQL)
	i := slices.IndexFunc(stmts, func(s string) bool { return strings.HasPrefix(s, "CREATE TRIGGER") })
	if i < 0 || !strings.HasSuffix(stmts[i], "END") || strings.Count(stmts[i], ";") < 3 || strings.HasPrefix(stmts[i-1], "CREATE TRIGGER") {
		t.Fatalf("the outbox migration split into %d statements: %q", len(stmts), stmts)
	}
	if _, err := Plan(txboxdriver.MySQL, Config{Schema: "s"}); err == nil {
		t.Error("a schema on MySQL was accepted")
	}
}
