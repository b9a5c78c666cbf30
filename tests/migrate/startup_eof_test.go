package migrate_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// replyCutProxy forwards TCP connections to a database and, once armed,
// cuts the connection in the middle of the server's replies: after the
// first n whole messages of the wire protocol (the client then reads a
// plain EOF where the next message should start), or with mid one byte of
// the next message besides (the client reads an unexpected EOF). It
// counts messages, so it is deterministic. Connections opened after the
// cut go through untouched.
type replyCutProxy struct {
	ln     net.Listener
	target string
	frame  func(b []byte) int // length of the first whole message in b, 0 if none yet

	mu    sync.Mutex
	armed bool
	left  int  // whole messages still to forward
	mid   bool // and one byte of the next
	cut   bool
}

func newReplyCutProxy(t *testing.T, target string, frame func([]byte) int) *replyCutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	p := &replyCutProxy{ln: ln, target: target, frame: frame}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *replyCutProxy) addr() string { return p.ln.Addr().String() }

// arm makes the proxy cut after n more whole messages (and one byte, with mid).
func (p *replyCutProxy) arm(n int, mid bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.left, p.mid, p.cut = true, n, mid, false
}

// disarm stops counting and reports whether the proxy cut a connection.
func (p *replyCutProxy) disarm() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	return p.cut
}

func (p *replyCutProxy) serve() {
	acceptPairs(p.ln, p.target, func(c, up net.Conn) {
		go func() { _, _ = io.Copy(up, c); _ = c.Close(); _ = up.Close() }()
		go p.down(c, up)
	})
}

// down forwards the server's replies whole message by whole message,
// counting them while the proxy is armed.
func (p *replyCutProxy) down(c, up net.Conn) {
	defer func() { _ = c.Close(); _ = up.Close() }()
	var pending []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			l := p.frame(pending)
			if l == 0 || l > len(pending) {
				break
			}
			send, stop := p.pass(pending[:l], len(pending) > l)
			if _, werr := c.Write(send); werr != nil || stop {
				return
			}
			pending = pending[l:]
		}
		if err != nil {
			return
		}
	}
}

// pass says what to write of the whole message msg and whether to cut the
// connection after it; more tells whether bytes of a next message follow.
func (p *replyCutProxy) pass(msg []byte, more bool) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || p.cut {
		return msg, false
	}
	if p.left > 0 {
		p.left--
		return msg, false
	}
	p.cut = true
	if p.mid && len(msg) > 1 {
		return msg[:1], true
	}
	return nil, true
}

// pgFrame frames PostgreSQL's backend messages: a type byte and a length
// that counts itself.
func pgFrame(b []byte) int {
	if len(b) < 5 {
		return 0
	}
	return 1 + int(binary.BigEndian.Uint32(b[1:5]))
}

// myFrame frames MySQL's packets: a 3-byte length and a sequence number.
func myFrame(b []byte) int {
	if len(b) < 4 {
		return 0
	}
	return 4 + (int(b[0]) | int(b[1])<<8 | int(b[2])<<16)
}

// startupCutSweep runs a relay group's start-up check of a migrated,
// sound outbox table (relay.Group.Add) once for every place its database
// connection can be cut in the replies, and fails if a cut is reported
// as a finding about the table (a *txbox.StartupError: "not migrated",
// "unreadable") or as an error that is not transient: a store whose
// connection dropped is to be retried, not left out nor migrated again.
// open returns a relay on a pool of one connection through the proxy,
// already connected, and a func closing it.
func startupCutSweep(t *testing.T, p *replyCutProxy, open func() (*relay.Relay, func(error) bool, func())) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang, not a speed
	defer cancel()
	cuts := 0
	for _, mid := range []bool{false, true} {
		for n := 0; ; n++ {
			r, transient, closeDB := open()
			g := quietGroup(t)
			p.arm(n, mid)
			err := g.Add(ctx, relay.Store{Name: "s", Relay: r})
			cut := p.disarm()
			closeDB()
			var se *txbox.StartupError
			switch {
			case errors.As(err, &se):
				t.Fatalf("cut after %d message(s) (mid %v): reported as a finding about the table: %v", n, mid, err)
			case err != nil && !transient(err):
				t.Fatalf("cut after %d message(s) (mid %v): an error that is not transient: %v (%T)", n, mid, err, errors.Unwrap(err))
			}
			if !cut {
				if err != nil {
					t.Fatalf("no cut, yet: %v", err)
				}
				break
			}
			cuts++
		}
	}
	if cuts < 10 {
		t.Fatalf("only %d cut(s): the check read too little", cuts)
	}
	t.Logf("%d cut(s), none reported as a finding", cuts)
}

// A PostgreSQL connection cut anywhere in the replies of the start-up
// check (EOF, unexpected EOF) is a transient error, never "not migrated"
// or "unreadable".
func TestStartupCheckCutRepliesPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy, cfg := migratedPostgresBehindCuts(t)
	startupCutSweep(t, proxy, func() (*relay.Relay, func(error) bool, func()) {
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		testenv.Must(t, err, "pool")
		testenv.Must(t, pool.Ping(ctx), "ping")
		drv := txboxpgx.New(pool)
		r, err := relay.New(drv, &drivertest.Recorder{}, relay.Config{DisableNotify: true})
		testenv.Must(t, err, "relay")
		return r, func(err error) bool { return txboxdriver.IsTransientFor(drv, err) }, pool.Close
	})
}

// The same on MySQL/MariaDB (invalid connection, driver.ErrBadConn, EOF).
func TestStartupCheckCutRepliesMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MySQL(t)
	m, err := txboxmigrate.New(txboxsql.New(db, txboxdriver.MySQL), txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "up")
	var name string
	testenv.Must(t, db.QueryRow("SELECT DATABASE()").Scan(&name), "database")
	base, err := mysqldrv.ParseDSN(testenv.MySQLDSN())
	testenv.Must(t, err, "dsn")
	proxy := newReplyCutProxy(t, base.Addr, myFrame)
	c := base.Clone()
	c.DBName, c.ParseTime, c.Net, c.Addr, c.Timeout = name, true, "tcp", proxy.addr(), 10*time.Second
	startupCutSweep(t, proxy, func() (*relay.Relay, func(error) bool, func()) {
		rdb, err := sql.Open("mysql", c.FormatDSN())
		testenv.Must(t, err, "open")
		rdb.SetMaxOpenConns(1)
		testenv.Must(t, rdb.PingContext(ctx), "ping")
		drv := txboxsql.New(rdb, txboxdriver.MySQL)
		r, err := relay.New[*sql.Tx](drv, &drivertest.Recorder{}, relay.Config{})
		testenv.Must(t, err, "relay")
		return r, func(err error) bool { return txboxdriver.IsTransientFor(drv, err) }, func() { _ = rdb.Close() }
	})
}

// The same on PostgreSQL through database/sql (pgx's stdlib, txboxsql):
// database/sql takes a driver's io.EOF from Rows.Next for the end of the
// rows, so a cut between two rows must not read as fewer rows.
func TestStartupCheckCutRepliesPostgresSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy, cfg := migratedPostgresBehindCuts(t)
	startupCutSweep(t, proxy, func() (*relay.Relay, func(error) bool, func()) {
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		testenv.Must(t, err, "pool")
		db := stdlib.OpenDBFromPool(pool)
		db.SetMaxOpenConns(1)
		testenv.Must(t, db.PingContext(ctx), "ping")
		drv := txboxsql.New(db, txboxdriver.Postgres)
		r, err := relay.New[*sql.Tx](drv, &drivertest.Recorder{}, relay.Config{DisableNotify: true})
		testenv.Must(t, err, "relay")
		return r, func(err error) bool { return txboxdriver.IsTransientFor(drv, err) }, func() { _ = db.Close(); pool.Close() }
	})
}

// On SQLite there is no connection to cut; a database that another
// writer holds locked past the busy timeout (SQLITE_BUSY, during the
// probe's write) is transient too, never a finding about the table.
func TestStartupCheckBusySQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "txbox.db")
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = db.Close() })
	m, err := txboxmigrate.New(txboxsql.New(db, txboxdriver.SQLite), txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "up")
	holder, err := db.BeginTx(ctx, nil) // _txlock=immediate: holds the write lock
	testenv.Must(t, err, "begin")
	defer func() { _ = holder.Rollback() }()

	busy, err := sql.Open("sqlite", strings.Replace(txboxsql.SQLiteDSN(path), "busy_timeout(10000)", "busy_timeout(0)", 1))
	testenv.Must(t, err, "open busy")
	t.Cleanup(func() { _ = busy.Close() })
	drv := txboxsql.New(busy, txboxdriver.SQLite)
	r, err := relay.New[*sql.Tx](drv, &drivertest.Recorder{}, relay.Config{})
	testenv.Must(t, err, "relay")
	g := quietGroup(t)
	addRetried(t, ctx, g, r, func(err error) bool { return txboxdriver.IsTransientFor(drv, err) }, "start-up check on a locked SQLite database")
	testenv.Must(t, holder.Rollback(), "rollback")
	testenv.Must(t, g.Add(ctx, relay.Store{Name: "s", Relay: r}), "Add once the lock is released")
}

// migratedPostgresBehindCuts migrates an outbox in a schema of its own and
// returns a reply-cutting proxy to the server and a one-connection pool
// config that reaches that schema through it.
func migratedPostgresBehindCuts(t *testing.T) (*replyCutProxy, *pgxpool.Config) {
	t.Helper()
	ctx := context.Background()
	direct, schema := testenv.Postgres(t, 2)
	m, err := txboxmigrate.New(txboxpgx.New(direct), txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "up")
	target := net.JoinHostPort(direct.Config().ConnConfig.Host, strconv.Itoa(int(direct.Config().ConnConfig.Port)))
	proxy := newReplyCutProxy(t, target, pgFrame)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	testenv.Must(t, err, "parse")
	host, port, _ := net.SplitHostPort(proxy.addr())
	pn, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(pn), nil
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 1
	return proxy, cfg
}
