package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/txbox/txbox/inspect"
)

// When the table's upkeep cannot be read (a permission, a timeout), stats
// prints the backlog and says why in one escaped line (JSON: table_error);
// off PostgreSQL (errors.ErrUnsupported) it says nothing of the table.
func TestStatsTableUnavailable(t *testing.T) {
	denied := errors.New("ERROR: permission denied for view pg_stat_activity \x1b[2J")
	for _, c := range []struct {
		name       string
		terr       error
		text, json string // want in the output; "" for no table line
	}{
		{"denied", denied, `unavailable: ERROR: permission denied for view pg_stat_activity \x1b[2J`, `"table_error":"ERROR: permission denied for view pg_stat_activity \u001b[2J"`},
		{"unsupported", fmt.Errorf("inspect: table health: %w", errors.ErrUnsupported), "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var text bytes.Buffer
			if err := printBacklog(&text, inspect.Backlog{}, inspect.Table{}, c.terr, throughput{}, false); err != nil {
				t.Fatal(err)
			}
			out := text.String()
			if !strings.Contains(out, "pending") || strings.Contains(out, "\x1b") {
				t.Fatalf("stats printed %q: want the backlog, escaped", out)
			}
			if c.text == "" && strings.Contains(out, "table") {
				t.Fatalf("stats printed a table line off PostgreSQL: %q", out)
			}
			if c.text != "" && !strings.Contains(out, c.text) {
				t.Fatalf("stats printed %q, want %q", out, c.text)
			}
			var js bytes.Buffer
			if err := printBacklog(&js, inspect.Backlog{}, inspect.Table{}, c.terr, throughput{}, true); err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(js.Bytes(), &v); err != nil {
				t.Fatalf("not JSON: %v: %s", err, js.Bytes())
			}
			if _, ok := v["table"]; ok {
				t.Fatalf("JSON has a table without its figures: %s", js.Bytes())
			}
			compact := strings.ReplaceAll(js.String(), `": "`, `":"`)
			if c.json != "" && !strings.Contains(compact, c.json) {
				t.Fatalf("JSON %s lacks %s", js.Bytes(), c.json)
			}
			if c.json == "" && strings.Contains(compact, "table_error") {
				t.Fatalf("JSON %s has a table_error off PostgreSQL", js.Bytes())
			}
		})
	}
}
