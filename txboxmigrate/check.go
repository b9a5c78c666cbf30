package txboxmigrate

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/txboxdriver"
)

// Check reports what stands between the database and the tables the
// Migrator was configured with: migrations not applied, a table that is
// missing, unreadable or altered since (see Verify). It changes nothing and
// returns nil when every table is ready. The relay and the consumer run it
// at start-up (Startup) and report its findings in a txbox.StartupError.
func (m *Migrator) Check(ctx context.Context) []string {
	problems, _ := m.Startup(ctx)
	return problems
}

// Startup is Check and CheckNewer from one read of the migration state:
// what the relay and the consumer run at start-up. An error that is not
// the database's answer about a table (see StartupOnce: a connection
// refused, reset or closed mid-reply, a timeout, an error no one
// recognises) is retried, 100 ms apart doubling to at most 5 s, with a
// warning to Config.Logger each time, until ctx ends: only tables that are
// missing, unmigrated or unusable are problems.
func (m *Migrator) Startup(ctx context.Context) (problems []string, newer string) {
	for try := 1; ; try++ {
		problems, newer, err := m.StartupOnce(ctx)
		if err == nil {
			return problems, newer
		}
		if ctx.Err() != nil {
			return append(problems, fmt.Sprintf("cannot check the tables: %v (%v)", err, ctx.Err())), newer
		}
		wait := backoff.Nth(100*time.Millisecond, 5*time.Second, try)
		m.log.Warn("txbox: the start-up check of the tables could not finish (the database failed or a statement timed out); trying again",
			"err", err, "try", try, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return append(problems, fmt.Sprintf("cannot check the tables: %v (%v)", err, ctx.Err())), newer
		case <-t.C:
		}
	}
}

// StartupOnce is one try of Startup, for a caller that retries on its
// own: err, when not nil, says the check could not finish (the database
// failed, a statement timed out, an error that is not the database's
// answer about a table) and is no finding about the tables. It is
// txboxdriver.IsTransient (its SafeToRetry is true: the check writes
// nothing), so a relay.Group's caller and relay/supervise retry the store.
func (m *Migrator) StartupOnce(ctx context.Context) (problems []string, newer string, err error) {
	done, err := m.applied(ctx, m.pool)
	if err = lost(err); err != nil {
		if !m.missingTable(err) || m.transient(err) {
			if !m.finding(err) {
				return nil, "", &checkFailed{fmt.Errorf("read %s: %w", trackingTable, err)}
			}
			return []string{fmt.Sprintf("cannot read the migration state: %v", err)}, "", nil
		}
		done = map[string]record{}
	}
	problems, err = m.check(ctx, done)
	if err != nil {
		err = &checkFailed{err}
	}
	return problems, m.newerNote(done), err
}

// checkFailed is the error of a start-up check that could not finish: it
// says nothing of the tables, and the check, which writes nothing (its
// probe rolls back), is safe to run again.
type checkFailed struct{ err error }

func (e *checkFailed) Error() string     { return e.err.Error() }
func (e *checkFailed) Unwrap() error     { return e.err }
func (e *checkFailed) SafeToRetry() bool { return true }

// finding reports whether err, from a statement of the check, is the
// database's answer about a table: an answer (an SQLSTATE, a SQLite
// result code, a MySQL error number) that does not say the database
// failed (txboxdriver.IsTransient, the driver's classifier) or that the
// statement ran out of time (SQLSTATE 57014, canceled by a statement
// timeout; MySQL's 1205, 3024 and MariaDB's 1969). Any other error, one
// with no answer in it (a context's deadline from a timeout of the driver
// or of the pool, a connection that failed, an error no one recognises),
// says the check could not run.
func (m *Migrator) finding(err error) bool {
	if err == nil || m.transient(err) {
		return false
	}
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		return len(state.SQLState()) == 5 && state.SQLState() != "57014"
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) && m.dialect == txboxdriver.SQLite {
		return true
	}
	if m.dialect == txboxdriver.MySQL && mysqlNumbered.MatchString(err.Error()) {
		return !m.mysqlError(err, 1205, 3024, 1969)
	}
	return false
}

// mysqlNumbered matches an error of the MySQL server as go-sql-driver
// prints it: "Error 1146 (42S02): …".
var mysqlNumbered = regexp.MustCompile(`Error \d+( \([0-9A-Z]{5}\))?:`)

// check is Check on the applied migrations done.
func (m *Migrator) check(ctx context.Context, done map[string]record) ([]string, error) {
	var problems []string
	byTarget := map[string][]string{}
	var order []string
	for _, p := range m.pending(done) {
		if byTarget[p.Target] == nil {
			order = append(order, p.Target)
		}
		byTarget[p.Target] = append(byTarget[p.Target], fmt.Sprintf("%d (%s)", p.Version, p.Name))
	}
	for _, t := range order {
		kind, table, _ := strings.Cut(t, ":")
		problems = append(problems, fmt.Sprintf("%s table %q is not migrated: pending migration(s) %s; run `txbox migrate up` or txboxmigrate.Migrator.Up",
			kind, m.name(table), strings.Join(byTarget[t], ", ")))
	}
	more, err := m.inspect(ctx, func(target string) bool { return byTarget[target] == nil })
	return append(problems, more...), err
}

// Verify inspects the tables whose migrations are all recorded, and says
// what is wrong with each and what to run: a table that is missing or
// unreadable, a column that is missing or of another kind of type than its
// migrations gave it, an outbox table that refuses the relay's writes (a
// trigger added by hand, say: it inserts a row, updates it as the relay
// does and rolls back). It returns nil when they are sound; err is a
// failure to read them. It changes nothing. `txbox migrate status` and
// `migrate up` run it.
func (m *Migrator) Verify(ctx context.Context) ([]string, error) {
	done, err := m.appliedOrNone(ctx)
	if err != nil {
		return nil, err
	}
	pending := map[string]bool{}
	for _, p := range m.pending(done) {
		pending[p.Target] = true
	}
	problems, err := m.inspect(ctx, func(target string) bool { return !pending[target] })
	if err != nil {
		return nil, fmt.Errorf("txbox: inspect the tables: %w", err)
	}
	return problems, nil
}

// inspect checks the table of each configured target that want accepts:
// it is readable, has every column its migrations create, each of the
// same kind of type, and an outbox table takes the relay's writes. An
// error that says the database failed is returned, not a problem.
func (m *Migrator) inspect(ctx context.Context, want func(target string) bool) ([]string, error) {
	var problems []string
	seen := map[string]bool{}
	for _, mg := range m.migrations {
		if seen[mg.Target] || !want(mg.Target) {
			continue
		}
		seen[mg.Target] = true
		kind, table, _ := strings.Cut(mg.Target, ":")
		found, err := m.tableProblems(ctx, mg.Target)
		if err = lost(err); err != nil {
			return problems, fmt.Errorf("%s table %q: %w", kind, m.name(table), err)
		}
		switch {
		case len(found) == 1 && found[0] == tableMissing:
			problems = append(problems, fmt.Sprintf("%s table %q is missing although its migrations are recorded; %s",
				kind, m.name(table), m.repair(mg.Target, found)))
		case len(found) > 0:
			problems = append(problems, fmt.Sprintf("%s table %q does not match its recorded migrations: %s; %s",
				kind, m.name(table), strings.Join(found, "; "), m.repair(mg.Target, found)))
		}
	}
	return problems, nil
}

// repair says what to run for a table with problems found.
func (m *Migrator) repair(target string, found []string) string {
	kind, table, _ := strings.Cut(target, ":")
	flags := ""
	if kind == KindInbox {
		flags = " --no-outbox --inbox-table " + table
	} else if kind == KindClaimCheck {
		flags = " --no-outbox --claim-check-table " + table
	} else if table != DefaultOutboxTable {
		flags = " --table " + table
	}
	if m.schema != "" {
		flags += " --schema " + m.schema
	}
	if len(found) == 1 && found[0] == tableMissing {
		return fmt.Sprintf("run `txbox migrate down --to 0 --force%s` (it drops what is left of the table's objects and forgets its migrations), then `txbox migrate up%s`", flags, flags)
	}
	return fmt.Sprintf("undo the change by hand (or drop the trigger), or recreate the table, losing its rows: `txbox migrate down --to 0 --force%s`, then `txbox migrate up%s`", flags, flags)
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
