package cli

import "github.com/txbox/txbox/internal/printable"

// cell returns s fit to print as one value of a table or a line: control
// characters (C0 with tab, CR and LF, DEL, C1), other runes that are not
// printable (strconv.IsPrint: format characters such as bidi overrides
// too), invalid UTF-8 and backslashes escaped as strconv.Quote escapes them,
// without the quotes. A value from the database can then neither send
// escape sequences to the terminal nor fake a row.
func cell(s string) string { return printable.Cell(s) }

// text is cell for a message of several lines, such as an error: it keeps
// line feeds and backslashes.
func text(s string) string { return printable.Text(s) }
