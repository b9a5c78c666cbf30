package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Cluster is a PostgreSQL cluster of a test's own (initdb and pg_ctl of
// the installed server), on a free port of 127.0.0.1, for what the shared
// server must not be put through: crashes, restarts, server settings. It
// is stopped and removed when the test ends.
type Cluster struct {
	t    testing.TB
	bin  string
	dir  string
	opts string
	URL  string // postgres://postgres@127.0.0.1:PORT/postgres
}

// PrivatePostgres makes and starts a new cluster with the given server
// settings ("name=value"). Without the server's binaries it skips, or fails
// when CI=true. As root, the server runs as the postgres user.
func PrivatePostgres(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		Unavailable(t, "PostgreSQL server binaries (initdb, pg_ctl)", fmt.Errorf("no /usr/lib/postgresql/*/bin/initdb"))
	}
	slices.Sort(bins)
	dir, err := os.MkdirTemp("", "txbox-pg-")
	Must(t, err, "cluster dir")
	c := &Cluster{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			Unavailable(t, "the postgres user (to run a private cluster as root)", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		Must(t, os.Chown(dir, uid, gid), "chown %s", dir)
	}
	t.Cleanup(func() {
		_ = c.run("pg_ctl", "-D", c.dir+"/data", "-m", "immediate", "-w", "stop")
		_ = os.RemoveAll(dir)
	})
	Must(t, c.run("initdb", "-D", dir+"/data", "-A", "trust", "-U", "postgres", "--no-sync"), "initdb")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Must(t, err, "free port")
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := []string{"-p " + strconv.Itoa(port), "-k " + dir, "-c listen_addresses=127.0.0.1"}
	for _, s := range settings {
		opts = append(opts, "-c "+s)
	}
	c.opts = strings.Join(opts, " ")
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	c.Start()
	return c
}

// Start starts the cluster (after Crash: with crash recovery) and waits
// until it accepts connections.
func (c *Cluster) Start() {
	c.t.Helper()
	Must(c.t, c.run("pg_ctl", "-D", c.dir+"/data", "-o", c.opts, "-l", c.dir+"/log", "-w", "start"), "pg_ctl start")
}

// Crash stops the server as a crash does: every process exits at once,
// and what sat in its WAL buffers, not yet written, is lost (commits made
// with synchronous_commit off among them).
func (c *Cluster) Crash() {
	c.t.Helper()
	Must(c.t, c.run("pg_ctl", "-D", c.dir+"/data", "-m", "immediate", "-w", "stop"), "pg_ctl stop -m immediate")
}

// run runs one of the server's programs, as the postgres user when root.
func (c *Cluster) run(prog string, args ...string) error {
	path := filepath.Join(c.bin, prog)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		return fmt.Errorf("%s: %w\n%s\nserver log:\n%s", prog, err, out, log)
	}
	return nil
}
