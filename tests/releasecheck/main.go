// Command releasecheck installs txbox as a stranger would, from a module
// proxy and with no replace directive: it builds a file-based module proxy
// from a commit of the checkout (each tagged module's zip made as the public
// proxy makes it, with golang.org/x/mod/zip, plus its .info, .mod and list
// files), then, in a fresh module with GOWORK=off, runs the README's install
// lines (go get of the core and the adapters, go install of the CLI), builds
// the README's Go quick start and runs the installed txbox. It fails when any
// step fails, when a txbox module resolves to another version than the
// release's, or when one came from anywhere but the file proxy.
//
//	go run github.com/txbox/txbox/tests/releasecheck [-rev HEAD] [-version v0.1.0] [-readme FILE] [-keep]
//
// Third-party modules come from the local module cache when it has them and
// from GOPROXY otherwise. The check keeps its own module cache (under the
// user cache directory, txbox modules removed before each run) so that the
// build cache stays warm between runs.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

const mod = "github.com/txbox/txbox"

// untagged are the modules of the repository that are never released.
var untagged = map[string]bool{mod + "/examples/orm": true}

func main() {
	log.SetFlags(0)
	log.SetPrefix("releasecheck: ")
	rev := flag.String("rev", "HEAD", "the commit to release")
	version := flag.String("version", "", "the release version (default: the version the modules require each other at)")
	keep := flag.Bool("keep", false, "keep the proxy and the user module (their directory is printed)")
	readme := flag.String("readme", "", "take the install lines and the quick start from this file, not from the commit's README.md")
	flag.Parse()
	if err := run(*rev, *version, *readme, *keep); err != nil {
		log.Fatal(err)
	}
	fmt.Println("releasecheck: ok")
}

// module is one module of the repository at the release commit.
type repoModule struct {
	path, dir string // dir relative to the repository's root, "" for the root
	gomod     []byte
}

func run(rev, version, readmeFile string, keep bool) error {
	start := time.Now()
	root, err := output("", nil, "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	root = strings.TrimSpace(root)
	commit, err := output(root, nil, "git", "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return err
	}
	commit = strings.TrimSpace(commit)
	mods, err := modules(root, commit)
	if err != nil {
		return err
	}
	if version == "" {
		version = requiredVersion(mods)
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Prerelease(version) != "" {
		return fmt.Errorf("release version %q is not of the form vX.Y.Z", version)
	}
	fmt.Printf("releasecheck: %d modules of %s at %s\n", len(mods), commit[:12], version)

	tmp, err := os.MkdirTemp("", "txbox-releasecheck-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("releasecheck: files kept in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	// zip.CreateFromVCS reads a repository whose .git is a directory; a
	// shared clone without a work tree is one, also for a worktree checkout.
	repo := filepath.Join(tmp, "repo")
	if _, err := output(root, nil, "git", "clone", "-q", "--shared", "--no-checkout", root, repo); err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	ctime, err := output(root, nil, "git", "show", "-s", "--format=%cI", commit)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(ctime))
	if err != nil {
		return err
	}
	for _, m := range mods {
		if err := publish(proxy, repo, commit, m, version, t.UTC()); err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
	}

	env, unlock, err := userEnv(tmp, proxy)
	if err != nil {
		return err
	}
	defer unlock()
	app := filepath.Join(tmp, "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		return err
	}
	var readme []byte
	if readmeFile != "" {
		readme, err = os.ReadFile(readmeFile)
	} else {
		readme, err = fileAt(root, commit, "README.md")
	}
	if err != nil {
		return err
	}
	lines, err := installLines(readme)
	if err != nil {
		return err
	}
	// An adapter alone, without the core got first, brings the core at the
	// release version.
	alone := filepath.Join(tmp, "alone")
	if err := os.MkdirAll(alone, 0o755); err != nil {
		return err
	}
	if _, err := step(alone, env, "go", "mod", "init", "example.com/alone"); err != nil {
		return err
	}
	if _, err := step(alone, env, "go", "get", mod+"/natsjs@"+version); err != nil {
		return err
	}
	if out, err := step(alone, env, "go", "list", "-m", mod); err != nil {
		return err
	} else if strings.TrimSpace(out) != mod+" "+version {
		return fmt.Errorf("go get %s/natsjs@%s selected %s", mod, version, strings.TrimSpace(out))
	}
	if _, err := step(app, env, "go", "mod", "init", "example.com/app"); err != nil {
		return err
	}
	for _, l := range lines {
		if _, err := step(app, env, l...); err != nil {
			return err
		}
	}
	quick, err := quickStart(readme)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), quick, 0o644); err != nil {
		return err
	}
	if _, err := step(app, env, "go", "mod", "tidy"); err != nil {
		return err
	}
	if _, err := step(app, env, "go", "build", "-o", filepath.Join(tmp, "app.bin"), "."); err != nil {
		return err
	}
	graph, err := step(app, env, "go", "list", "-m", "-f", "{{.Path}} {{.Version}} {{with .Replace}}replaced{{end}}", "all")
	if err != nil {
		return err
	}
	for _, want := range []string{mod, mod + "/txboxpgx", mod + "/natsjs"} {
		if !strings.Contains(graph, want+" "+version+" \n") {
			return fmt.Errorf("the user module does not require %s %s:\n%s", want, version, graph)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(graph), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && strings.HasPrefix(f[0], mod) && f[1] != version {
			return fmt.Errorf("the user module resolved %s at %s, not %s", f[0], f[1], version)
		}
	}
	bin := filepath.Join(env.get("GOBIN"), "txbox")
	out, err := step(app, env, bin, "version")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(out, "txbox "+version+" ") {
		return fmt.Errorf("txbox version printed %q, want txbox %s", strings.TrimSpace(out), version)
	}
	fmt.Printf("releasecheck:   %s", out)
	if _, err := step(app, env, bin, "--help"); err != nil {
		return err
	}
	if err := sameAsProxy(env.get("GOMODCACHE"), proxy); err != nil {
		return err
	}
	fmt.Printf("releasecheck: installed and built from the file proxy in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// modules lists the tagged modules at commit.
func modules(root, commit string) ([]repoModule, error) {
	ls, err := output(root, nil, "git", "ls-tree", "-r", "--name-only", commit)
	if err != nil {
		return nil, err
	}
	var mods []repoModule
	for _, name := range strings.Split(strings.TrimSpace(ls), "\n") {
		if name != "go.mod" && !strings.HasSuffix(name, "/go.mod") {
			continue
		}
		data, err := fileAt(root, commit, name)
		if err != nil {
			return nil, err
		}
		dir := path.Dir(name)
		if dir == "." {
			dir = ""
		}
		p := modfile.ModulePath(data)
		want := path.Join(mod, dir)
		if p != want {
			return nil, fmt.Errorf("%s declares module %q, not %s", name, p, want)
		}
		if untagged[p] {
			continue
		}
		mods = append(mods, repoModule{path: p, dir: dir, gomod: data})
	}
	if len(mods) == 0 {
		return nil, errors.New("no go.mod at " + commit)
	}
	return mods, nil
}

// requiredVersion is the version at which a module requires the core.
func requiredVersion(mods []repoModule) string {
	for _, m := range mods {
		f, err := modfile.ParseLax("go.mod", m.gomod, nil)
		if err != nil {
			continue
		}
		for _, r := range f.Require {
			if r.Mod.Path == mod {
				return r.Mod.Version
			}
		}
	}
	return ""
}

// publish writes m's .info, .mod and .zip at version, and its list, in the
// file proxy's layout.
func publish(proxy, root, commit string, m repoModule, version string, t time.Time) error {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		return err
	}
	mv := module.Version{Path: m.path, Version: version}
	if err := zip.CreateFromVCS(f, mv, root, commit, m.dir); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if _, err := zip.CheckZip(mv, f.Name()); err != nil {
		return err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t})
	for name, data := range map[string][]byte{version + ".info": info, version + ".mod": m.gomod, "list": []byte(version + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

type environ []string

func (e environ) get(k string) string {
	for i := len(e) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(e[i], k+"="); ok {
			return v
		}
	}
	return ""
}

// userEnv is a stranger's environment: no workspace, the file proxy first,
// no checksum database for txbox (its modules are not public yet), and a
// module cache holding no txbox module, locked against another run until
// unlock.
func userEnv(tmp, proxy string) (env environ, unlock func(), err error) {
	gomodcache, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, nil, err
	}
	upstream, err := goEnv("GOPROXY")
	if err != nil {
		return nil, nil, err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, nil, err
	}
	own := filepath.Join(cache, "txbox-releasecheck", "mod")
	if err := os.MkdirAll(own, 0o755); err != nil {
		return nil, nil, err
	}
	if unlock, err = lock(own + ".lock"); err != nil {
		return nil, nil, err
	}
	for _, d := range []string{filepath.Join(own, "github.com", "txbox"), filepath.Join(own, "cache", "download", "github.com", "txbox")} {
		if err := os.RemoveAll(d); err != nil {
			unlock()
			return nil, nil, err
		}
	}
	proxies := "file://" + filepath.ToSlash(proxy)
	if local := filepath.Join(gomodcache, "cache", "download"); gomodcache != own && isDir(local) {
		proxies += ",file://" + filepath.ToSlash(local)
	}
	if upstream != "" && upstream != "off" {
		proxies += "," + upstream
	}
	env = environ(os.Environ())
	return append(env,
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOPROXY="+proxies,
		"GONOSUMDB="+"github.com/txbox",
		"GOPRIVATE=",
		"GONOPROXY=",
		"GOTOOLCHAIN=local",
		// The go command indexes a module-cache directory by its path, taking
		// a version's files as immutable; here a version's files change from
		// one run to the next.
		"GODEBUG=goindex=0",
		"GOMODCACHE="+own,
		"GOBIN="+filepath.Join(tmp, "bin"),
	), unlock, nil
}

// sameAsProxy checks that every txbox file the go command downloaded is
// the file proxy's: none came from another proxy.
func sameAsProxy(gomodcache, proxy string) error {
	dl := filepath.Join(gomodcache, "cache", "download")
	n := 0
	err := filepath.WalkDir(filepath.Join(dl, "github.com", "txbox"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := filepath.Ext(p)
		if ext != ".zip" && ext != ".mod" {
			return nil
		}
		rel, _ := filepath.Rel(dl, p)
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(proxy, rel))
		if err != nil {
			return fmt.Errorf("%s came from outside the file proxy: %w", rel, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s differs from the file proxy's", rel)
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("no txbox module was downloaded")
	}
	return nil
}

// installLines are the go get and go install commands of the README's
// install block: the fenced sh block right after the first one.
func installLines(readme []byte) ([][]string, error) {
	blocks := fenced(readme, "sh")
	if len(blocks) < 2 {
		return nil, errors.New("README.md: no install block after the first sh block")
	}
	var lines [][]string
	core, adapters, cli := false, 0, false
	sc := bufio.NewScanner(strings.NewReader(blocks[1]))
	for sc.Scan() {
		l, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "go" || (f[1] != "get" && f[1] != "install") {
			continue
		}
		for _, a := range f[2:] {
			switch p, _, _ := strings.Cut(a, "@"); {
			case f[1] == "get" && p == mod:
				core = true
			case f[1] == "get" && (p == mod+"/txboxpgx" || p == mod+"/natsjs"):
				adapters++
			case f[1] == "install" && p == mod+"/cmd/txbox":
				cli = true
			}
		}
		lines = append(lines, f)
	}
	if !core || adapters != 2 || !cli {
		return nil, fmt.Errorf("README.md's install block must go get %s, %s/txboxpgx and %s/natsjs and go install %s/cmd/txbox:\n%s", mod, mod, mod, mod, blocks[1])
	}
	return lines, nil
}

// quickStart is the README's Go quick start.
func quickStart(readme []byte) ([]byte, error) {
	_, after, ok := strings.Cut(string(readme), "## Quick start (Go)\n")
	if !ok {
		return nil, errors.New("README.md has no \"## Quick start (Go)\" section")
	}
	blocks := fenced([]byte(after), "go")
	if len(blocks) == 0 || !strings.HasPrefix(blocks[0], "package main\n") {
		return nil, errors.New("README.md's quick start has no Go program")
	}
	return []byte(blocks[0]), nil
}

// fenced returns the bodies of the ```lang blocks of a Markdown text.
func fenced(md []byte, lang string) []string {
	var out []string
	rest := string(md)
	for {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			return out
		}
		body, tail, ok := strings.Cut(after, "\n```")
		if !ok {
			return out
		}
		out = append(out, body+"\n")
		rest = tail
	}
}

func fileAt(root, commit, name string) ([]byte, error) {
	out, err := output(root, nil, "git", "show", commit+":"+name)
	return []byte(out), err
}

func goEnv(k string) (string, error) {
	out, err := output("", nil, "go", "env", k)
	return strings.TrimSpace(out), err
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// step runs a command of the user's, printing it and its time.
func step(dir string, env environ, args ...string) (string, error) {
	t := time.Now()
	fmt.Printf("releasecheck: $ %s\n", strings.Join(args, " "))
	out, err := output(dir, env, args...)
	if err != nil {
		return out, err
	}
	fmt.Printf("releasecheck:   ok (%s)\n", time.Since(t).Round(100*time.Millisecond))
	return out, nil
}

func output(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}
