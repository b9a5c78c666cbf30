package cli_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// privateNATS starts /usr/sbin/nats-server with JetStream and the config
// lines extra on a free loopback port, stopped when the test ends, and
// returns its URL.
func privateNATS(t *testing.T, extra string) string {
	t.Helper()
	const bin = "/usr/sbin/nats-server"
	if _, err := os.Stat(bin); err != nil {
		testenv.Unavailable(t, "nats-server binary", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	addr := ln.Addr().String()
	_ = ln.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	testenv.Must(t, os.WriteFile(conf, []byte(fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\n%s\n", addr, filepath.Join(dir, "js"), extra)), 0o600), "write config")
	cmd := exec.Command(bin, "-c", conf)
	var log testenv.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	testenv.Must(t, cmd.Start(), "start nats-server")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "nats://" + addr
	for i := 0; ; i++ {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return url
		}
		if i == 200 {
			t.Fatalf("nats-server on %s never answered: %v\n%s", addr, err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A NATS server whose max_control_line (256) is below the line of a topic
// the table accepts closes the connection on that publish, and does not
// announce its limit. The relay rejects the row with the longest line on
// that close, learns the limit for the next connection, parks the row dead
// with the reason, and delivers the others.
func TestRelayLearnsMaxControlLine(t *testing.T) {
	t.Parallel()
	url := privateNATS(t, "max_control_line: 256")
	path := filepath.Join(t.TempDir(), "mcl.db")
	dbURL := "sqlite://" + path
	mustRun(t, "migrate", "up", "--db", dbURL)
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open sqlite")
	t.Cleanup(func() { _ = db.Close() })
	long := "l." + strings.Repeat("x", 248) // 250 bytes: a valid topic
	for _, topic := range []string{"ok.1", long, "ok.2", "ok.3"} {
		_, err := db.Exec(`INSERT INTO txbox_outbox (topic, payload) VALUES (?, x'00')`, topic)
		testenv.Must(t, err, "insert %.10s", topic)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, []string{"relay", "--db", dbURL, "--broker", url, "--subject-prefix", "p.", "--stream", "MCL",
			"--stream-subjects", "p.>", "--poll-interval", "50ms", "--max-attempts", "5"}, &out, &errOut)
	}()
	// Wait for the rows to settle: bounded by progress (nothing changed
	// for 20 s), not by a total time.
	state := func() string {
		var s string
		testenv.Must(t, db.QueryRow(`SELECT group_concat(id || ':' || (published_at IS NOT NULL) || (dead_at IS NOT NULL), ' ') FROM txbox_outbox`).Scan(&s), "read rows")
		return s
	}
	const want = "1:10 2:01 3:10 4:10"
	last, since := "", time.Now()
	for s := state(); s != want; s = state() {
		if s != last {
			last, since = s, time.Now()
		}
		if time.Since(since) > 20*time.Second {
			t.Fatalf("rows %q for 20 s, want %q (published, dead)\nstderr:\n%s", s, want, errOut.String())
		}
		select {
		case err := <-done:
			t.Fatalf("relay exited: %v\nstderr:\n%s", err, errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var lastError string
	testenv.Must(t, db.QueryRow(`SELECT last_error FROM txbox_outbox WHERE id = 2`).Scan(&lastError), "read last_error")
	t.Logf("the long row's last_error: %s", lastError)
	if !strings.Contains(lastError, "max control line") {
		t.Errorf("last_error %q does not name the max control line", lastError)
	}
	cancel()
	testenv.Must(t, <-done, "relay")
}
