package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// freePort returns a loopback port nothing listens on (for now).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

// proxy forwards TCP connections from a loopback port to target; inject
// writes bytes to every client as if the target had sent them.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, port int, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	testenv.Must(t, err, "proxy listen")
	p := &proxy{l: l, target: target}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return p
}

func (p *proxy) inject(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < len(p.conns); i += 2 {
		_, _ = p.conns[i].Write(b)
	}
}

func (p *proxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// sqliteOutbox makes a migrated SQLite outbox and returns its --db URL and
// a way to insert a row and to count the undelivered ones.
func sqliteOutbox(t *testing.T) (string, func(topic string), func() int) {
	dir := t.TempDir()
	dbURL := "sqlite://" + filepath.Join(dir, "app.db")
	mustRun(t, "migrate", "up", "--db", dbURL)
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "app.db")))
	testenv.Must(t, err, "open sqlite")
	t.Cleanup(func() { _ = db.Close() })
	insert := func(topic string) {
		_, err := db.Exec(`INSERT INTO txbox_outbox (topic, payload) VALUES (?, 'x')`, topic)
		testenv.Must(t, err, "insert")
	}
	pending := func() int {
		var n int
		testenv.Must(t, db.QueryRow(`SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL`).Scan(&n), "count")
		return n
	}
	return dbURL, insert, pending
}

// relayCmd runs `txbox relay args...` until the test ends or stop is called,
// which returns the command's error.
func relayCmd(t *testing.T, args ...string) (errOut *testenv.Buffer, stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.Buffer
	errOut = &testenv.Buffer{}
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx, append([]string{"relay"}, args...), &out, errOut) }()
	stopped := false
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the relay did not stop")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return errOut, stop
}

func waitFor(t *testing.T, what string, cond func() bool, logs *testenv.Buffer) {
	t.Helper()
	// The relay's stderr is the progress shown: the wait fails once it
	// stayed the same for testenv.Stall.
	testenv.Await(t, what, func() (bool, string) { return cond(), "stderr:\n" + logs.String() })
}

// The relay started while its NATS server is down waits for it, logging
// each try with a doubling wait, and delivers once the server is up.
func TestRelayWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	dbURL, insert, pending := sqliteOutbox(t)
	port := freePort(t)
	prefix := testenv.Subject()
	insert(prefix + "a")
	logs, stop := relayCmd(t, "--db", dbURL, "--broker", "nats://127.0.0.1:"+strconv.Itoa(port),
		"--stream", "HEAL", "--stream-subjects", prefix+">", "--poll-interval", "20ms", "--stats-interval", "0")
	waitFor(t, "three failed tries", func() bool { return strings.Count(logs.String(), "broker unreachable; trying again") >= 3 }, logs)
	for _, want := range []string{"try=1", "retry_in=100ms", "try=2", "retry_in=200ms", "try=3", "retry_in=400ms"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("stderr lacks %q:\n%s", want, logs.String())
		}
	}
	srv, err := natsembed.Start(natsembed.Config{Dir: t.TempDir(), Port: port})
	testenv.Must(t, err, "start nats")
	defer srv.Shutdown()
	waitFor(t, "the row delivered", func() bool { return pending() == 0 }, logs)
	if err := stop(); err != nil {
		t.Fatalf("relay: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "broker reached") {
		t.Fatalf("no line for the broker reached:\n%s", logs.String())
	}
}

// The relay started while PostgreSQL is unreachable (a port with nothing
// behind it, then a proxy to the real server) waits for it and delivers.
func TestRelayWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	admin, schema := pgSchema(t)
	dbArgs := []string{"--db", testenv.PostgresURL(), "--schema", schema}
	mustRun(t, append([]string{"migrate", "up"}, dbArgs...)...)
	ctx := context.Background()
	prefix := testenv.Subject()
	_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.txbox_outbox (topic, payload) VALUES ($1, 'x')`, prefix+"a")
	testenv.Must(t, err, "insert")

	pgAddr := "127.0.0.1:5432"
	port := freePort(t)
	url := strings.Replace(testenv.PostgresURL(), "localhost:5432", "127.0.0.1:"+strconv.Itoa(port), 1)
	url = strings.Replace(url, pgAddr, "127.0.0.1:"+strconv.Itoa(port), 1)
	if url == testenv.PostgresURL() {
		t.Skipf("cannot put a proxy into %s", testenv.PostgresURL())
	}
	nc := testenv.NATS(t)
	js, _ := jetstream.New(nc)
	stream := strings.ToUpper(testenv.Name("HEAL"))
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	logs, stop := relayCmd(t, "--db", url, "--schema", schema, "--broker", testenv.NATSURL(),
		"--stream", stream, "--stream-subjects", prefix+">", "--poll-interval", "20ms", "--stats-interval", "0")
	waitFor(t, "two failed tries", func() bool { return strings.Count(logs.String(), "unreachable; trying again") >= 2 }, logs)
	if !strings.Contains(logs.String(), "msg=\"database postgres://") {
		t.Fatalf("the tries do not name the database:\n%s", logs.String())
	}
	startProxy(t, port, pgAddr)
	var n int
	waitFor(t, "the row delivered", func() bool {
		testenv.Must(t, admin.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.txbox_outbox WHERE published_at IS NULL`).Scan(&n), "count")
		return n == 0
	}, logs)
	if err := stop(); err != nil {
		t.Fatalf("relay: %v\n%s", err, logs.String())
	}
}

// A database without the outbox table is a start-up error, at once and
// without retries: exit code 1 and the problems on stderr.
func TestRelayUnmigratedDatabaseExits1(t *testing.T) {
	t.Parallel()
	srv := testenv.EmbeddedNATS(t)
	for name, db := range map[string]func(t *testing.T) []string{
		"sqlite": func(t *testing.T) []string {
			return []string{"--db", emptySQLite(t, "empty.db")}
		},
		"postgres": func(t *testing.T) []string {
			_, schema := pgSchema(t)
			return []string{"--db", testenv.PostgresURL(), "--schema", schema}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"relay", "--broker", srv.ClientURL(), "--stream", "UNMIGRATED", "--stream-subjects", "unmigrated.>"}, db(t)...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, errOut bytes.Buffer
			code := cli.Main(ctx, args, &out, &errOut)
			if code != 1 || !strings.Contains(errOut.String(), "txbox: error: relay cannot start") ||
				!strings.Contains(errOut.String(), "txbox migrate up") {
				t.Fatalf("exit %d, stderr:\n%s\nwant 1 and the start-up problems", code, errOut.String())
			}
			// It gave up on its own: a relay that retried would have run
			// until its context ended.
			if strings.Contains(errOut.String(), "trying again") || ctx.Err() != nil {
				t.Fatalf("an unmigrated table was retried (context: %v):\n%s", ctx.Err(), errOut.String())
			}
		})
	}
}

// A NATS connection closed for good by the server (here a proxy injects the
// server's -ERR for an over-long control line) makes the relay build a new
// one and go on delivering.
func TestRelayRebuildsAClosedBrokerConnection(t *testing.T) {
	t.Parallel()
	dbURL, insert, pending := sqliteOutbox(t)
	srv := testenv.EmbeddedNATS(t)
	port := freePort(t)
	px := startProxy(t, port, "127.0.0.1:"+strconv.Itoa(srv.Port()))
	prefix := testenv.Subject()
	logs, stop := relayCmd(t, "--db", dbURL, "--broker", "nats://127.0.0.1:"+strconv.Itoa(port),
		"--stream", "HEAL", "--stream-subjects", prefix+">", "--poll-interval", "20ms", "--stats-interval", "0")
	insert(prefix + "a")
	waitFor(t, "the first row delivered", func() bool { return pending() == 0 }, logs)

	px.inject([]byte("-ERR 'Maximum Control Line Exceeded'\r\n"))
	waitFor(t, "the relay to notice", func() bool {
		return strings.Contains(logs.String(), "the broker connection is closed for good; connecting again")
	}, logs)
	insert(prefix + "b")
	waitFor(t, "the second row delivered", func() bool { return pending() == 0 }, logs)
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("relay: %v\n%s", err, logs.String())
	}
	if n := strings.Count(logs.String(), "relay started"); n != 2 {
		t.Fatalf("relay started %d times, want 2:\n%s", n, logs.String())
	}
}
