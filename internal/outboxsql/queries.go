// Package outboxsql holds the outbox's SQL for each dialect and the code that
// runs it: the multi-row insert of Outbox.Add and the relay's claim, mark,
// reject and cleanup.
package outboxsql

import (
	"embed"
	"fmt"
	"strings"

	"github.com/txbox/txbox/driver"
)

//go:embed sql/*.sql
var files embed.FS

// queries maps a query's name to its SQL, with {{table}} filled in.
type queries map[string]string

// ParseNamed splits SQL text into "-- name: x" sections.
func ParseNamed(text string) map[string]string {
	out := map[string]string{}
	name := ""
	var b strings.Builder
	flush := func() {
		if name != "" {
			out[name] = strings.TrimSpace(b.String())
		}
		b.Reset()
	}
	for _, line := range strings.Split(text, "\n") {
		if n, ok := strings.CutPrefix(line, "-- name: "); ok {
			flush()
			name = strings.TrimSpace(n)
			continue
		}
		if name == "" || strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	flush()
	return out
}

func loadQueries(d driver.Dialect, table string) (queries, error) {
	text, err := files.ReadFile("sql/" + string(d) + ".sql")
	if err != nil {
		return nil, fmt.Errorf("txbox: no outbox SQL for dialect %q", d)
	}
	q := queries{}
	for name, sql := range ParseNamed(string(text)) {
		q[name] = strings.ReplaceAll(sql, "{{table}}", table)
	}
	return q, nil
}
