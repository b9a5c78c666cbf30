package txboxmigrate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/txbox/txbox/internal/migratesql"
	"github.com/txbox/txbox/txboxdriver"
)

// ScriptOptions says how a script for another migration tool is framed.
type ScriptOptions struct {
	// NoBegin leaves out the BEGIN and COMMIT around the script, for a tool
	// that runs it in a transaction of its own (Flyway, atlas, psql -1).
	// Without it, a script runs whole or not at all under plain psql -f
	// or sqlite3. MySQL scripts have none either way: MySQL commits each
	// DDL statement on its own.
	NoBegin bool
}

// SQL returns every migration as one script for another migration tool
// (UpScript).
func (m *Migrator) SQL() string {
	s, _ := UpScript(m.dialect, m.schema, m.migrations, ScriptOptions{})
	return s
}

// PlanSQL returns the script Migrator.SQL would for cfg, without a
// database.
func PlanSQL(d txboxdriver.Dialect, cfg Config) (string, error) {
	ms, err := Plan(d, cfg)
	if err != nil {
		return "", err
	}
	return UpScript(d, cfg.Schema, ms, ScriptOptions{})
}

// UpScript returns the migrations ms (from Plan, for schema) as one SQL
// script for goose, atlas, Flyway, psql, sqlite3 or mysql. Like Up, it
// creates the schema and txbox_migrations if missing and records each
// migration there (a row already there is kept), so that the relay, the
// consumer and `txbox migrate status` find the tables migrated and
// Migrator.Up finds nothing left to do. On PostgreSQL it waits, inside its
// transaction, for a concurrent Up. On MySQL a trigger's body is enclosed
// in DELIMITER lines (the mysql client's and Flyway's syntax).
func UpScript(d txboxdriver.Dialect, schema string, ms []Migration, opts ScriptOptions) (string, error) {
	sql, err := migratesql.New(d, schema, trackingTable)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- txbox migrations, for a migration tool or psql -f. Each is recorded in %s,\n-- as `txbox migrate up` records it: txbox finds the tables migrated.\n", trackingTable)
	begin(&b, d, opts)
	for _, stmt := range setup(sql, schema) {
		fmt.Fprintf(&b, "%s;\n", stmt)
	}
	for _, mg := range ms {
		fmt.Fprintf(&b, "\n-- txbox migration %s version %d (%s)\n", mg.Target, mg.Version, mg.Name)
		writeSQL(&b, d, mg.SQL)
		fmt.Fprintf(&b, "%s;\n", sql.ScriptRecord(mg.Target, mg.Version, mg.Name))
	}
	commit(&b, d, opts)
	return b.String(), nil
}

// DownScript returns the down migrations of ms, the newest first, as one
// SQL script: what Down runs for ms, the removal of their rows in
// txbox_migrations included, framed as UpScript's.
func DownScript(d txboxdriver.Dialect, schema string, ms []Migration, opts ScriptOptions) (string, error) {
	sql, err := migratesql.New(d, schema, trackingTable)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- txbox down migrations, newest first; each removes its row in %s.\n", trackingTable)
	begin(&b, d, opts)
	for _, stmt := range setup(sql, schema) {
		fmt.Fprintf(&b, "%s;\n", stmt)
	}
	for _, mg := range slices.Backward(ms) {
		fmt.Fprintf(&b, "\n-- txbox revert %s version %d (%s)\n", mg.Target, mg.Version, mg.Name)
		writeSQL(&b, d, mg.Down)
		fmt.Fprintf(&b, "%s;\n", sql.ScriptForget(mg.Target, mg.Version))
	}
	commit(&b, d, opts)
	return b.String(), nil
}

// GooseScript returns ms as one goose migration file: under "-- +goose
// Up", what UpScript holds; under "-- +goose Down", what DownScript holds;
// each statement between "-- +goose StatementBegin" and "-- +goose
// StatementEnd" (PL/pgSQL and trigger bodies hold semicolons of their
// own). goose runs each section in a transaction of its own.
func GooseScript(d txboxdriver.Dialect, schema string, ms []Migration) (string, error) {
	sql, err := migratesql.New(d, schema, trackingTable)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	stmt := func(s string) { fmt.Fprintf(&b, "-- +goose StatementBegin\n%s;\n-- +goose StatementEnd\n", s) }
	section := func(text string) {
		for _, s := range splitStatements(text) {
			stmt(s)
		}
	}
	fmt.Fprintf(&b, "-- txbox migrations; goose records them in its own table, txbox in %s.\n-- +goose Up\n", trackingTable)
	for _, s := range setup(sql, schema) {
		stmt(s)
	}
	for _, mg := range ms {
		fmt.Fprintf(&b, "\n-- txbox migration %s version %d (%s)\n", mg.Target, mg.Version, mg.Name)
		section(mg.SQL)
		stmt(sql.ScriptRecord(mg.Target, mg.Version, mg.Name))
	}
	b.WriteString("\n-- +goose Down\n")
	for _, s := range setup(sql, schema) {
		stmt(s)
	}
	for _, mg := range slices.Backward(ms) {
		fmt.Fprintf(&b, "\n-- txbox revert %s version %d (%s)\n", mg.Target, mg.Version, mg.Name)
		section(mg.Down)
		stmt(sql.ScriptForget(mg.Target, mg.Version))
	}
	return b.String(), nil
}

// setup returns the statements a script begins with, as ensureTracking
// runs them: the setup lock, the schema, the tracking table, then the
// lock on it that makes a concurrent Up wait.
func setup(sql migratesql.Dialect, schema string) []string {
	var out []string
	if q := sql.SetupLock(); q != "" {
		out = append(out, q)
	}
	if q := sql.CreateSchema(); schema != "" && q != "" {
		out = append(out, q)
	}
	out = append(out, sql.CreateTracking())
	if q := sql.ScriptLock(); q != "" {
		out = append(out, q)
	}
	return out
}

func begin(b *strings.Builder, d txboxdriver.Dialect, opts ScriptOptions) {
	switch {
	case d == txboxdriver.MySQL:
		b.WriteString("-- MySQL commits each DDL statement on its own: a script that stops part way\n-- leaves the migrations before the failing one applied and recorded, and\n-- `txbox migrate up` finishes the rest.\n")
	case !opts.NoBegin:
		b.WriteString("BEGIN;\n")
	}
}

func commit(b *strings.Builder, d txboxdriver.Dialect, opts ScriptOptions) {
	if d != txboxdriver.MySQL && !opts.NoBegin {
		b.WriteString("\nCOMMIT;\n")
	}
}

// writeSQL writes a migration's SQL as it is, but on MySQL the statement
// between the lines "-- txbox:begin" and "-- txbox:end" (a trigger whose
// body holds semicolons) between DELIMITER lines.
func writeSQL(b *strings.Builder, d txboxdriver.Dialect, sql string) {
	var block []string
	inBlock := false
	for _, line := range strings.Split(strings.TrimSpace(sql), "\n") {
		switch t := strings.TrimSpace(line); {
		case d == txboxdriver.MySQL && t == "-- txbox:begin":
			inBlock, block = true, nil
		case d == txboxdriver.MySQL && t == "-- txbox:end":
			inBlock = false
			stmt := strings.TrimSuffix(strings.TrimSpace(strings.Join(block, "\n")), ";")
			fmt.Fprintf(b, "DELIMITER //\n%s//\nDELIMITER ;\n", stmt)
		case inBlock:
			block = append(block, line)
		default:
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
}
