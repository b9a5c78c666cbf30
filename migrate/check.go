package migrate

import (
	"context"
	"fmt"
	"strings"

	"github.com/txbox/txbox/internal/sqlname"
)

// Check reports what stands between the database and the tables the
// Migrator was configured with: migrations not applied, a table that is
// missing or unreadable. It changes nothing and returns nil when every
// table is ready. The relay and the consumer run it at start-up and report
// its findings in a txbox.StartupError.
func (m *Migrator) Check(ctx context.Context) []string {
	problems, _ := m.Startup(ctx)
	return problems
}

// Startup is Check and CheckNewer from one read of the migration state:
// what the relay and the consumer run at start-up.
func (m *Migrator) Startup(ctx context.Context) (problems []string, newer string) {
	done, err := m.appliedOrNone(ctx)
	if err != nil {
		return []string{fmt.Sprintf("cannot read the migration state: %v", err)}, ""
	}
	return m.check(ctx, m.pending(done)), m.newerNote(done)
}

// check is Check on the migrations found pending.
func (m *Migrator) check(ctx context.Context, pending []Migration) []string {
	var problems []string
	byTarget := map[string][]string{}
	var order []string
	for _, p := range pending {
		if byTarget[p.Target] == nil {
			order = append(order, p.Target)
		}
		byTarget[p.Target] = append(byTarget[p.Target], fmt.Sprintf("%d (%s)", p.Version, p.Name))
	}
	for _, t := range order {
		kind, table, _ := strings.Cut(t, ":")
		problems = append(problems, fmt.Sprintf("%s table %q is not migrated: pending migration(s) %s; run `txbox migrate up` or migrate.Migrator.Up",
			kind, m.name(table), strings.Join(byTarget[t], ", ")))
	}
	seen := map[string]bool{}
	for _, mg := range m.migrations {
		if seen[mg.Target] || byTarget[mg.Target] != nil {
			continue
		}
		seen[mg.Target] = true
		kind, table, _ := strings.Cut(mg.Target, ":")
		rows, err := m.pool.Query(ctx, "SELECT * FROM "+sqlname.Qualified(m.dialect, m.schema, table)+" WHERE 1 = 0")
		if err == nil {
			rows.Next()
			_ = rows.Close()
			err = rows.Err()
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s table %q is missing or unreadable although its migrations are recorded: %v", kind, m.name(table), err))
		}
	}
	return problems
}

// CheckNewer says, when a newer txbox release has migrated the configured
// tables further than this one knows, which migrations and how to go back;
// "" otherwise, and when the tracking table cannot be read (Check says
// so). The relay and the consumer log it at start-up as a warning, not an
// error: during a rolling upgrade, instances of the earlier release start
// against tables the new one has migrated.
func (m *Migrator) CheckNewer(ctx context.Context) string {
	done, err := m.applied(ctx, m.pool)
	if err != nil {
		return ""
	}
	return m.newerNote(done)
}

// newerNote is CheckNewer's note on the applied migrations done.
func (m *Migrator) newerNote(done map[string]record) string {
	newer := m.newer(done)
	if len(newer) == 0 {
		return ""
	}
	names := make([]string, len(newer))
	for i, n := range newer {
		kind, table, _ := strings.Cut(n.Target, ":")
		names[i] = fmt.Sprintf("%s table %q %d (%s)", kind, m.name(table), n.Version, n.Name)
	}
	return fmt.Sprintf("a newer txbox release applied migration(s) this one does not know: %s; to go back to this release for good, revert them with the newer release's `txbox migrate down`",
		strings.Join(names, ", "))
}

// name is table as users write it: schema.table, or table.
func (m *Migrator) name(table string) string {
	if m.schema != "" {
		return m.schema + "." + table
	}
	return table
}
