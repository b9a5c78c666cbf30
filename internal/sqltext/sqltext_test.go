package sqltext

import "testing"

// A section named "_x" is a partial: other sections call it with an
// argument, and it needs no destination.
func TestLoadPartials(t *testing.T) {
	file := `-- name: a
{{template "_p" false}}
-- name: b
{{template "_p" true}}
-- name: _p
-- a partial's comment
SELECT 1{{if .}}, 2{{end}}
`
	var a, b string
	if err := Load("f", file, nil, map[string]*string{"a": &a, "b": &b}); err != nil {
		t.Fatal(err)
	}
	if a != "SELECT 1" || b != "SELECT 1, 2" {
		t.Fatalf("a %q, b %q", a, b)
	}
	if err := Load("f", file, nil, map[string]*string{"a": &a}); err == nil {
		t.Fatal("section b without a destination: no error")
	}
}
