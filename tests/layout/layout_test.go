// Package layout_test checks the repository's layering and module graph,
// so that they cannot regress: the seams sit at the bottom, each adapter
// pulls in only its own SDK, and a program using the core and one broker
// compiles none of the others.
package layout_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

const mod = "github.com/txbox/txbox"

// repoRoot is the repository's root: two levels above this file.
func repoRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

type pkg struct {
	ImportPath string
	Deps       []string
	Imports    []string
	Module     *struct{ Path string }
}

// listPkgs runs go list -deps-free -json over every txbox package of the
// workspace.
func listPkgs(t *testing.T) []pkg {
	cmd := exec.Command("go", "list", "-json", mod+"/...")
	cmd.Dir = repoRoot(t)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// library reports whether p is a package users import (not the CLI, not
// the tests, not the examples, which may use the tests' services).
func library(p string) bool {
	return !strings.HasPrefix(p, mod+"/cmd/") && !strings.HasPrefix(p, mod+"/tests") && !strings.HasPrefix(p, mod+"/examples/")
}

func txboxDeps(p pkg) []string {
	var out []string
	for _, d := range p.Deps {
		if d == mod || strings.HasPrefix(d, mod+"/") {
			out = append(out, d)
		}
	}
	return out
}

func TestLayering(t *testing.T) {
	t.Parallel()
	sdks := []string{"github.com/jackc/pgx", "github.com/nats-io/", "github.com/rabbitmq/", "github.com/redis/",
		"github.com/hibiken/", "github.com/twmb/", "modernc.org/", "github.com/go-sql-driver/", "github.com/spf13/",
		"github.com/prometheus/", "go.opentelemetry.io/"}
	core := map[string]bool{mod: true, mod + "/txboxdriver": true, mod + "/relay": true, mod + "/relay/supervise": true, mod + "/consumer": true,
		mod + "/inbox": true, mod + "/txboxmigrate": true, mod + "/dlq": true, mod + "/dead": true, mod + "/txboxsql": true,
		mod + "/drivertest": true, mod + "/brokertest": true, mod + "/txboxtest": true, mod + "/health": true, mod + "/claimcheck": true}
	adapters := map[string]bool{mod + "/natsjs": true, mod + "/txboxrabbitmq": true, mod + "/redisstream": true, mod + "/txboxasynq": true, mod + "/txboxkafka": true, mod + "/txboxpgx": true}
	seen := 0
	for _, p := range listPkgs(t) {
		if !library(p.ImportPath) {
			continue
		}
		seen++
		for _, d := range txboxDeps(p) {
			if !library(d) {
				t.Errorf("%s imports %s: no library package may import the CLI, the bench or the tests", p.ImportPath, d)
			}
			internal := strings.HasPrefix(p.ImportPath, mod+"/internal/")
			if internal && !strings.HasPrefix(d, mod+"/internal/") && d != mod+"/txboxdriver" {
				t.Errorf("%s imports %s: internal packages sit below the public ones", p.ImportPath, d)
			}
			if adapters[p.ImportPath] && d != mod && d != mod+"/txboxdriver" && d != mod+"/dlq" && !strings.HasPrefix(d, mod+"/internal/") {
				t.Errorf("%s imports %s: an adapter imports only the root package (and the driver and dlq seams)", p.ImportPath, d)
			}
		}
		if core[p.ImportPath] || strings.HasPrefix(p.ImportPath, mod+"/internal/") {
			for _, d := range p.Deps {
				for _, s := range sdks {
					if strings.HasPrefix(d, s) {
						t.Errorf("%s depends on %s: the core imports no database library or broker SDK", p.ImportPath, d)
					}
				}
			}
		}
	}
	if seen < 12 {
		t.Fatalf("only %d library packages checked", seen)
	}
}

// A user program that imports the core, txboxpgx and natsjs has none of the
// other adapters' SDKs, the CLI's or the tests' in its module graph. The
// program's own go.mod points the three modules at the checkout, standing in
// for a module proxy; tests/releasecheck builds the same program from a file
// proxy with no replace at all.
func TestUserModuleGraph(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := t.TempDir()
	gomod := "module example.com/app\n\ngo 1.26.0\n\n"
	for _, m := range []string{"", "/txboxpgx", "/natsjs"} {
		gomod += "require " + mod + m + " " + releaseVersion(t) + "\n"
		gomod += "replace " + mod + m + " => " + filepath.Join(root, m) + "\n"
	}
	// The README's quick start is the program, so that it compiles too;
	// extra.go adds the consumer and the inbox.
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, quick, ok := strings.Cut(string(readme), "## Quick start (Go)\n\n```go\n")
	if !ok {
		t.Fatal("README.md has no Go quick start")
	}
	quick, _, _ = strings.Cut(quick, "```\n")
	extra := `package main

import (
	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/inbox"
)

var (
	_ *consumer.Consumer[pgx.Tx]
	_ inbox.Config
)
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(quick), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "extra.go"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "./...")
	graph := run("list", "-m", "all")
	for _, banned := range []string{"github.com/spf13/cobra", "github.com/twmb/franz-go", "github.com/hibiken/asynq",
		"github.com/redis/go-redis", "github.com/rabbitmq/amqp091-go", "modernc.org/sqlite", "github.com/go-sql-driver/mysql",
		"github.com/nats-io/nats-server", "github.com/prometheus/", "go.opentelemetry.io/", mod + "/tests", mod + "/cmd"} {
		if strings.Contains(graph, banned) {
			t.Errorf("the module graph of a program using txbox, txboxpgx, relay, natsjs, consumer and inbox holds %s", banned)
		}
	}
	t.Logf("%d modules in the graph:\n%s", strings.Count(graph, "\n"), graph)
}

// mayReplace are the modules that are never a dependency of a user's
// program (the CLI's tests import the tests module, which is tagged for
// that); they keep replace directives for work outside the workspace.
var mayReplace = map[string]bool{mod + "/tests": true, mod + "/examples/orm": true}

type goMod struct {
	dir  string // relative to the repository's root
	file *modfile.File
}

// goMods parses every go.mod file git tracks in the repository.
func goMods(t *testing.T) []goMod {
	root := repoRoot(t)
	cmd := exec.Command("git", "ls-files", "--", "go.mod", "*/go.mod")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var mods []goMod
	for _, rel := range strings.Fields(string(out)) {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(rel, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, goMod{dir: filepath.Dir(rel), file: f})
	}
	if len(mods) < 10 {
		t.Fatalf("found only %d go.mod files", len(mods))
	}
	return mods
}

// releaseVersion is the one version at which the modules require each
// other.
func releaseVersion(t *testing.T) string {
	for _, m := range goMods(t) {
		for _, r := range m.file.Require {
			if r.Mod.Path == mod {
				return r.Mod.Version
			}
		}
	}
	t.Fatal("no module requires " + mod)
	return ""
}

// TestModulesInstallable checks what go get and go install need: no
// published go.mod has a replace directive (a dependency's replaces are
// ignored, and go install pkg@version refuses them), each module lives in
// the directory its path names, every go.mod requires its siblings at one
// release version, and go.work uses every module.
func TestModulesInstallable(t *testing.T) {
	t.Parallel()
	mods := goMods(t)
	want := releaseVersion(t)
	if !semver.IsValid(want) || semver.Prerelease(want) != "" || semver.Build(want) != "" {
		t.Errorf("siblings are required at %s, not a release version vX.Y.Z", want)
	}
	paths := map[string]bool{}
	for _, m := range mods {
		paths[m.file.Module.Mod.Path] = true
	}
	for _, m := range mods {
		path := m.file.Module.Mod.Path
		wantPath := mod
		if m.dir != "." {
			wantPath = mod + "/" + filepath.ToSlash(m.dir)
		}
		if path != wantPath {
			t.Errorf("%s/go.mod declares module %s; the Go tooling finds it at %s only", m.dir, path, wantPath)
		}
		if !mayReplace[path] {
			for _, r := range m.file.Replace {
				t.Errorf("%s/go.mod replaces %s: a published module has no replace directive (go.work serves development)", m.dir, r.Old.Path)
			}
		}
		for _, r := range m.file.Require {
			if r.Mod.Path != mod && !strings.HasPrefix(r.Mod.Path, mod+"/") {
				continue
			}
			if !paths[r.Mod.Path] {
				t.Errorf("%s/go.mod requires %s, which is no module of this repository", m.dir, r.Mod.Path)
			}
			if r.Mod.Version != want {
				t.Errorf("%s/go.mod requires %s %s, want the release version %s", m.dir, r.Mod.Path, r.Mod.Version, want)
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, u := range work.Use {
		used[filepath.Clean(u.Path)] = true
	}
	for _, m := range mods {
		if !used[m.dir] {
			t.Errorf("go.work does not use %s", m.dir)
		}
	}
}
