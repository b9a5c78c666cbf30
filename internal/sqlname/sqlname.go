// Package sqlname validates and quotes the table and schema names that users
// configure, so they can be spliced into SQL text safely.
package sqlname

import (
	"fmt"
	"regexp"

	"github.com/txbox/txbox/txboxdriver"
)

// MaxLen is the longest identifier accepted (PostgreSQL's limit is 63 bytes).
const MaxLen = 63

var valid = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate reports whether name is a plain SQL identifier: a letter or
// underscore, then letters, digits and underscores, at most 63 bytes.
// Quoted identifiers with other characters are refused on purpose: a name
// that needs quoting is a name a hand-written query will get wrong.
func Validate(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%s name is empty", kind)
	}
	if len(name) > MaxLen {
		return fmt.Errorf("%s name %q is longer than %d bytes", kind, name, MaxLen)
	}
	if !valid.MatchString(name) {
		return fmt.Errorf("%s name %q is not a valid SQL identifier (want [A-Za-z_][A-Za-z0-9_]*)", kind, name)
	}
	return nil
}

// Quote quotes a validated identifier for dialect d.
func Quote(d txboxdriver.Dialect, name string) string {
	if d == txboxdriver.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// Qualified returns the quoted schema.table, or the quoted table when schema
// is empty. Both parts must have been validated.
func Qualified(d txboxdriver.Dialect, schema, table string) string {
	if schema == "" {
		return Quote(d, table)
	}
	return Quote(d, schema) + "." + Quote(d, table)
}

// Derived names an index, trigger, function or helper table of table:
// table_suffix, with the table part shortened to keep within MaxLen.
func Derived(table, suffix string) string {
	if keep := MaxLen - len(suffix) - 1; len(table) > keep {
		table = table[:keep]
	}
	return table + "_" + suffix
}
