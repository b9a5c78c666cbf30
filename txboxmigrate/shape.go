package txboxmigrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
)

// column is a column that a target's migrations create, and the kind of
// its type (typeKind).
type column struct{ name, kind string }

// columns returns the columns that target's migrations give its table, in
// order: those of its CREATE TABLE, then those ALTER TABLE … ADD COLUMN
// adds, less those DROP COLUMN drops.
func (m *Migrator) columns(target string) []column {
	_, table, _ := strings.Cut(target, ":")
	quoted := sqlname.Qualified(m.dialect, m.schema, table)
	var out []column
	for _, mg := range m.migrations {
		if mg.Target != target {
			continue
		}
		for _, stmt := range splitStatements(mg.SQL) {
			words := strings.Fields(stmt)
			switch {
			case len(words) > 2 && strings.EqualFold(words[0], "CREATE") && strings.EqualFold(words[1], "TABLE"):
				rest := strings.TrimSpace(stmt[strings.Index(strings.ToUpper(stmt), "TABLE")+len("TABLE"):])
				if up := strings.ToUpper(rest); strings.HasPrefix(up, "IF NOT EXISTS ") {
					rest = strings.TrimSpace(rest[len("IF NOT EXISTS "):])
				}
				if !strings.HasPrefix(rest, quoted+" ") && !strings.HasPrefix(rest, quoted+"(") {
					continue
				}
				body := rest[strings.Index(rest, "(")+1 : strings.LastIndex(rest, ")")]
				for _, line := range strings.Split(body, "\n") {
					f := strings.Fields(line)
					if len(f) < 2 || strings.HasPrefix(f[0], "--") {
						continue
					}
					switch strings.ToUpper(f[0]) {
					case "CONSTRAINT", "INDEX", "KEY", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN":
						continue
					}
					out = append(out, column{unquote(f[0]), typeKind(f[1])})
				}
			case len(words) > 3 && strings.EqualFold(words[0], "ALTER") && strings.EqualFold(words[1], "TABLE") && words[2] == quoted:
				for i := 3; i+2 < len(words); i++ {
					if !strings.EqualFold(words[i+1], "COLUMN") {
						continue
					}
					name := unquote(words[i+2])
					switch strings.ToUpper(words[i]) {
					case "ADD":
						if i+3 < len(words) {
							out = append(out, column{name, typeKind(words[i+3])})
						}
					case "DROP":
						out = slices.DeleteFunc(out, func(c column) bool { return c.name == name })
					}
				}
			}
		}
	}
	return out
}

func unquote(s string) string { return strings.Trim(strings.TrimSuffix(s, ","), "\"`") }

// typeKind is the kind of a column type, as a migration declares it or a
// catalog reports it: "integer", "text", "bytes", "json", "time", or the
// type itself lower-cased. A column retyped within its kind (integer to
// bigint) still serves; one retyped across kinds does not.
func typeKind(t string) string {
	t = strings.ToLower(strings.TrimSuffix(t, ","))
	if i := strings.IndexByte(t, '('); i >= 0 {
		t = t[:i]
	}
	switch {
	case slices.Contains([]string{"integer", "int", "bigint", "smallint", "tinyint", "mediumint"}, t):
		return "integer"
	case slices.Contains([]string{"text", "varchar", "char", "character", "character varying", "tinytext", "mediumtext", "longtext"}, t):
		return "text"
	case slices.Contains([]string{"bytea", "blob", "tinyblob", "mediumblob", "longblob", "binary", "varbinary"}, t):
		return "bytes"
	case t == "jsonb" || t == "json":
		return "json"
	case strings.HasPrefix(t, "timestamp") || t == "datetime":
		return "time"
	}
	return t
}

// catalogColumns returns the columns of target's table as the catalog
// lists them, with the kind of each type; none when the table is missing.
func (m *Migrator) catalogColumns(ctx context.Context, table string) (map[string]string, error) {
	var q string
	var arg any
	switch m.dialect {
	case txboxdriver.Postgres:
		q = "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped"
		arg = sqlname.Qualified(m.dialect, m.schema, table)
	case txboxdriver.SQLite:
		q, arg = "SELECT name, type FROM pragma_table_info(?)", table
	case txboxdriver.MySQL:
		q, arg = "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?", table
	default:
		return nil, fmt.Errorf("no catalog query for dialect %q", m.dialect)
	}
	rows, err := m.pool.Query(ctx, q, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		out[strings.ToLower(name)] = typ
	}
	return out, rows.Err()
}

// tableMissing is tableProblems' finding on a table that is not there.
const tableMissing = "the table is missing"

// tableProblems inspects target's table (see Verify); err is a failure to
// read it that says nothing of the table (see finding).
func (m *Migrator) tableProblems(ctx context.Context, target string) ([]string, error) {
	kind, table, _ := strings.Cut(target, ":")
	rows, err := m.pool.Query(ctx, "SELECT * FROM "+sqlname.Qualified(m.dialect, m.schema, table)+" WHERE 1 = 0")
	if err == nil {
		rows.Next()
		_ = rows.Close()
		err = rows.Err()
	}
	switch {
	case err != nil && m.missingTable(err) && !m.transient(err):
		return []string{tableMissing}, nil
	case err != nil && !m.finding(err):
		return nil, err
	case err != nil:
		return []string{fmt.Sprintf("the table is unreadable: %v", err)}, nil
	}
	have, err := m.catalogColumns(ctx, table)
	if err != nil {
		if !m.finding(err) {
			return nil, err
		}
		return []string{fmt.Sprintf("cannot read its columns from the catalog: %v", err)}, nil
	}
	var problems []string
	for _, c := range m.columns(target) {
		typ, ok := have[c.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("column %s is missing", c.name))
		case typeKind(typ) != c.kind:
			problems = append(problems, fmt.Sprintf("column %s is %s, where its migrations made it of %s type", c.name, typ, c.kind))
		}
	}
	if len(problems) == 0 && kind == KindOutbox {
		if err := m.probe(ctx, table); err != nil {
			if !m.finding(err) {
				return nil, err
			}
			if denied(err) {
				return nil, nil // a role without INSERT: the probe cannot tell
			}
			problems = append(problems, fmt.Sprintf("it refuses the relay's writes (a row inserted, marked failed and published, then rolled back): %v", err))
		}
	}
	return problems, nil
}

// probe inserts a row into the outbox table, updates it as the relay does
// when a publish fails and when it succeeds, and rolls back: a trigger or
// a constraint added by hand that refuses the relay's writes fails it.
func (m *Migrator) probe(ctx context.Context, table string) error {
	t := sqlname.Qualified(m.dialect, m.schema, table)
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	const topic, why = "txbox.probe", "txbox start-up probe, rolled back"
	var id int64
	switch m.dialect {
	case txboxdriver.Postgres:
		err = scanOne(ctx, tx, &id, "INSERT INTO "+t+" (topic, payload) VALUES ($1, '\\x'::bytea) RETURNING id", topic)
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+t+" SET attempts = attempts + 1, last_error = $2, next_attempt_at = now() WHERE id = $1", id, why)
		}
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+t+" SET published_at = now() WHERE id = $1", id)
		}
	case txboxdriver.SQLite:
		now := time.Now().UnixMicro()
		err = scanOne(ctx, tx, &id, "INSERT INTO "+t+" (topic, payload) VALUES (?, X'') RETURNING id", topic)
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+t+" SET attempts = attempts + 1, last_error = ?, next_attempt_at = ? WHERE id = ?", why, now, id)
		}
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+t+" SET published_at = ? WHERE id = ?", now, id)
		}
	case txboxdriver.MySQL:
		_, err = tx.Exec(ctx, "INSERT INTO "+t+" (topic, payload) VALUES (?, '')", topic)
		if err == nil {
			err = scanOne(ctx, tx, &id, "SELECT LAST_INSERT_ID()")
		}
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+t+" SET attempts = attempts + 1, last_error = ?, next_attempt_at = UTC_TIMESTAMP(6) WHERE id = ?", why, id)
		}
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+t+" SET published_at = UTC_TIMESTAMP(6) WHERE id = ?", id)
		}
	}
	return err
}

// denied reports whether err is the database refusing the probe's INSERT
// for want of a privilege (PostgreSQL 42501, MySQL 1142): a relay may run
// as a role that reads and marks rows but never inserts them.
func denied(err error) bool {
	var state interface{ SQLState() string }
	if errors.As(err, &state) && state.SQLState() == "42501" {
		return true
	}
	return strings.Contains(err.Error(), "Error 1142")
}

// scanOne runs q and scans its one row's one column into dest.
func scanOne(ctx context.Context, ex txboxdriver.Executor, dest any, q string, args ...any) error {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("no row returned")
	}
	if err := rows.Scan(dest); err != nil {
		return err
	}
	return rows.Close()
}
