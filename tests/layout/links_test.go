package layout_test

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// trackedFiles lists the files git tracks in the repository whose names
// match the patterns.
func trackedFiles(t *testing.T, root string, patterns ...string) []string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"ls-files", "--"}, patterns...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}

// mdDoc is what a Markdown file offers and asks for: the anchors of its
// headings and its links, as written.
type mdDoc struct {
	anchors map[string]bool
	links   []string
}

var markdown = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough))

// parseMarkdown reads the links and the heading anchors of a Markdown
// file. Links inside code spans and fenced blocks are not links.
func parseMarkdown(src []byte) mdDoc {
	d := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	doc := markdown.Parser().Parse(text.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			slug := githubSlug(plainText(n, src))
			if k := seen[slug]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		case *ast.Link:
			d.links = append(d.links, string(n.Destination))
		case *ast.Image:
			d.links = append(d.links, string(n.Destination))
		}
		return ast.WalkContinue, nil
	})
	return d
}

// plainText is a node's text as GitHub renders it, without markup.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// githubSlug is the anchor GitHub gives a heading: lower case, letters,
// digits, '-' and '_' kept, spaces turned into '-', the rest dropped.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Web dashboard":                           "web-dashboard",
		"Tracing (OpenTelemetry)":                 "tracing-opentelemetry",
		"txbox migrate up":                        "txbox-migrate-up",
		"Several stores in one relay: --db, x":    "several-stores-in-one-relay---db-x",
		"Deleting delivered rows (--retention 0)": "deleting-delivered-rows---retention-0",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
	d := parseMarkdown([]byte("# A\n\n## `txbox dead`\n\n## A\n\n```sh\n# not a heading\n[no](link.md)\n```\n\n`[no](code.md)` [yes](x.md#a-1)\n"))
	for _, a := range []string{"a", "txbox-dead", "a-1"} {
		if !d.anchors[a] {
			t.Errorf("anchor %q missing from %v", a, d.anchors)
		}
	}
	if d.anchors["not-a-heading"] || len(d.links) != 1 || d.links[0] != "x.md#a-1" {
		t.Errorf("anchors %v, links %q: code taken for Markdown", d.anchors, d.links)
	}
}

// TestMarkdownLinks checks that every relative link of every Markdown file
// in the repository names a file that exists and, when it has a #fragment,
// a heading of that file (GitHub's anchors).
func TestMarkdownLinks(t *testing.T) {
	root := repoRoot(t)
	docs := map[string]mdDoc{}
	load := func(rel string) (mdDoc, error) {
		if d, ok := docs[rel]; ok {
			return d, nil
		}
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return mdDoc{}, err
		}
		d := parseMarkdown(src)
		docs[rel] = d
		return d, nil
	}
	files := trackedFiles(t, root, "*.md")
	if len(files) == 0 {
		t.Fatal("git ls-files lists no Markdown file")
	}
	for _, file := range files {
		d, err := load(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range d.links {
			u, err := url.Parse(link)
			if err != nil {
				t.Errorf("%s: link %q: %v", file, link, err)
				continue
			}
			if u.Scheme != "" || u.Host != "" || strings.HasPrefix(link, "//") {
				continue // absolute: not this repository's to check
			}
			target := file
			if u.Path != "" {
				if strings.HasPrefix(u.Path, "/") {
					t.Errorf("%s: link %q is absolute to the site, not relative to the file", file, link)
					continue
				}
				target = filepath.ToSlash(filepath.Join(filepath.Dir(file), u.Path))
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", file, link, target)
					continue
				}
			}
			if u.Fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", file, link)
				continue
			}
			td, err := load(target)
			if err != nil {
				t.Errorf("%s: link %q: %v", file, link, err)
				continue
			}
			if !td.anchors[u.Fragment] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", file, link, target, u.Fragment)
			}
		}
	}
}

// docsPath is a path into docs/ as Go files name it in comments, help
// texts and file names.
var docsPath = regexp.MustCompile(`\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_]`)

// TestGoFilesNameDocsThatExist checks that every docs/… path a Go file of
// the repository names (package doc comments, help texts, tests reading a
// page) is a file or directory of docs/.
func TestGoFilesNameDocsThatExist(t *testing.T) {
	root := repoRoot(t)
	for _, file := range trackedFiles(t, root, "*.go") {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(src, []byte("\n")) {
			for _, m := range docsPath.FindAll(line, -1) {
				p := strings.TrimRight(string(m), ".")
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s:%d names %s, which does not exist", file, i+1, p)
				}
			}
		}
	}
}
