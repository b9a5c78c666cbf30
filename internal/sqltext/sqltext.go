// Package sqltext reads txbox's embedded SQL files: their "-- name: x"
// sections and their one template syntax, Go's text/template with
// functions that name tables ({{table}}, {{index "x"}}, …).
package sqltext

import (
	"fmt"
	"strings"
	"text/template"

	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
)

// Sections splits SQL text into its "-- name: x" sections, dropping comment
// lines and the text before the first section.
func Sections(text string) map[string]string {
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

// Render executes text as a template with funcs; partials are templates
// it may call by name ({{template "_x" arg}}).
func Render(name, text string, funcs template.FuncMap, partials ...map[string]string) (string, error) {
	t := template.New(name).Funcs(funcs)
	for _, ps := range partials {
		for pn, pt := range ps {
			if _, err := t.New(pn).Parse(pt); err != nil {
				return "", fmt.Errorf("txbox: SQL %s: %w", pn, err)
			}
		}
	}
	if _, err := t.Parse(text); err != nil {
		return "", fmt.Errorf("txbox: SQL %s: %w", name, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, nil); err != nil {
		return "", fmt.Errorf("txbox: SQL %s: %w", name, err)
	}
	return b.String(), nil
}

// Load renders every section of file (named name in errors) with funcs into
// the string that one of dests names for it. A section whose name starts
// with "_" is a partial: the others may call it ({{template "_x" arg}}),
// it has no destination. A section without a destination, or a destination
// without a section, is an error: the SQL files and the code that runs
// them cannot drift apart silently.
func Load(name, file string, funcs template.FuncMap, dests ...map[string]*string) error {
	dest := map[string]*string{}
	for _, d := range dests {
		for sec, p := range d {
			dest[sec] = p
		}
	}
	sections := Sections(file)
	partials := map[string]string{}
	for sec, text := range sections {
		if strings.HasPrefix(sec, "_") {
			partials[sec] = text
			delete(sections, sec)
		}
	}
	for sec, text := range sections {
		p, ok := dest[sec]
		if !ok {
			return fmt.Errorf("txbox: SQL %s: section %q is not used", name, sec)
		}
		s, err := Render(name+":"+sec, text, funcs, partials)
		if err != nil {
			return err
		}
		*p = s
	}
	for sec := range dest {
		if _, ok := sections[sec]; !ok {
			return fmt.Errorf("txbox: SQL %s: no section %q", name, sec)
		}
	}
	return nil
}

// Names returns the template functions naming table (in schema, which may
// be empty) and the objects derived from it, quoted for dialect d:
//
//	{{schema}}     the schema
//	{{table}}      the table, schema-qualified
//	{{index "x"}}  the index <table>_x_idx (indexes and triggers live in
//	{{ident "x"}}  <table>_x               their table's schema)
//	{{name "x"}}   <table>_x, schema-qualified (functions, helper tables)
func Names(d txboxdriver.Dialect, schema, table string) template.FuncMap {
	return template.FuncMap{
		"schema": func() string { return sqlname.Quote(d, schema) },
		"table":  func() string { return sqlname.Qualified(d, schema, table) },
		"index":  func(x string) string { return sqlname.Quote(d, sqlname.Derived(table, x+"_idx")) },
		"ident":  func(x string) string { return sqlname.Quote(d, sqlname.Derived(table, x)) },
		"name":   func(x string) string { return sqlname.Qualified(d, schema, sqlname.Derived(table, x)) },
	}
}
