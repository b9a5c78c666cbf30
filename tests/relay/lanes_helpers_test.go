package relay_test

import (
	"context"
	"database/sql"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// sendLog records every Publish call of the relays sharing it: which relay,
// which messages, and when the messages were sent (the call's start to the
// end of its sending, before any blocking a test asks for).
type sendLog struct {
	mu    sync.Mutex
	calls []sendCall
}

type sendCall struct {
	relay      string
	ids        []string
	payloads   []string
	start, end time.Time
}

// logPublisher acknowledges every message after logging it; block, when
// set, is called after logging and its error fails the whole call.
type logPublisher struct {
	name  string
	log   *sendLog
	block func(ctx context.Context) error
}

func (p *logPublisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	c := sendCall{relay: p.name, start: time.Now()}
	for _, m := range msgs {
		c.ids = append(c.ids, m.ID)
		c.payloads = append(c.payloads, string(m.Payload))
	}
	c.end = time.Now()
	p.log.mu.Lock()
	p.log.calls = append(p.log.calls, c)
	p.log.mu.Unlock()
	if p.block != nil {
		if err := p.block(ctx); err != nil {
			errs := make([]error, len(msgs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
	}
	return nil
}

func (l *sendLog) snapshot() []sendCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// sentBy returns how many messages relay sent.
func (l *sendLog) sentBy(relay string) int {
	n := 0
	for _, c := range l.snapshot() {
		if c.relay == relay {
			n += len(c.ids)
		}
	}
	return n
}

// checkLanes fails t if a lane ever had two relays sending at once, if a
// key's messages were sent out of order (payload "key:n", n counting from 1
// per key, in commit order; a re-send may start again from an earlier
// message, but no message is sent before the one before it), or if a
// message added was never sent.
// It returns how many messages were sent more than once.
func (l *sendLog) checkLanes(t *testing.T, e laneEnv, want map[string]int) int {
	t.Helper()
	// The lane of a keyed row, as the claims compute it; -1 without a key
	// (any relay may send those).
	laneOf := map[string]int16{}
	for _, r := range e.pairs(t, e.laneOf) {
		lane, err := strconv.Atoi(r[1])
		testenv.Must(t, err, "lane")
		laneOf[r[0]] = int16(lane)
	}

	type span struct {
		relay      string
		start, end time.Time
	}
	byLane := map[int16][]span{}
	calls := l.snapshot()
	for _, c := range calls {
		seen := map[int16]bool{}
		for _, id := range c.ids {
			lane, ok := laneOf[id]
			if !ok {
				t.Fatalf("sent message %s is not in the table", id)
			}
			if lane >= 0 && !seen[lane] {
				seen[lane] = true
				byLane[lane] = append(byLane[lane], span{c.relay, c.start, c.end})
			}
		}
	}
	for lane, spans := range byLane {
		for i, a := range spans {
			for _, b := range spans[i+1:] {
				if a.relay != b.relay && a.start.Before(b.end) && b.start.Before(a.end) {
					t.Fatalf("lane %d: relays %s and %s sent at once (%v-%v and %v-%v)", lane, a.relay, b.relay,
						a.start.Format("15:04:05.000000"), a.end.Format("15:04:05.000000"), b.start.Format("15:04:05.000000"), b.end.Format("15:04:05.000000"))
				}
			}
		}
	}

	slices.SortStableFunc(calls, func(a, b sendCall) int { return a.start.Compare(b.start) })
	next := map[string]int{}
	sent := map[string]bool{}
	dups := 0
	for _, c := range calls {
		for i, p := range c.payloads {
			key, v, _ := strings.Cut(p, ":")
			n, _ := strconv.Atoi(v)
			// The key's next message, or a re-send from an earlier one
			// (the duplicate window: the unmarked messages of a relay
			// that died, a run of the key among them, are sent again
			// from the first, in order); never a gap.
			if n > next[key]+1 {
				t.Fatalf("key %s: message %d sent by %s after message %d", key, n, c.relay, next[key])
			}
			if sent[c.ids[i]] {
				dups++
			}
			sent[c.ids[i]] = true
			next[key] = n
		}
	}
	for key, n := range want {
		if next[key] != n {
			t.Fatalf("key %s: %d of %d messages sent", key, next[key], n)
		}
	}
	return dups
}

// keyedAdder adds messages "key:n" in commit order per key.
type keyedAdder struct {
	mu   sync.Mutex
	next map[string]int
	f    fixture
}

func (a *keyedAdder) add(t *testing.T, keys ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next == nil {
		a.next = map[string]int{}
	}
	msgs := make([]txbox.Message, len(keys))
	for i, k := range keys {
		a.next[k]++
		msgs[i] = txbox.Message{Topic: "lanes.t", Key: k, Payload: []byte(k + ":" + strconv.Itoa(a.next[k]))}
	}
	a.f.add(t, true, msgs...)
}

func (a *keyedAdder) want() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps(a.next)
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// laneEnv is the database of a lane test, PostgreSQL or MySQL: the
// fixture that adds messages, and what the tests need of its dialect.
type laneEnv struct {
	f      fixture
	target string // the server's address, for proxies
	// relay returns a relay with lanes on a pool of its own, through proxy
	// when it is not nil, and a func closing the pool.
	relay func(t *testing.T, proxy interface{ Addr() string }, pub txbox.Publisher, cfg relay.Config) (*relay.Relay, func())
	// pairs runs a query of two text columns.
	pairs func(t *testing.T, q string) [][2]string
	// expire ends every lease; laneOf reads message_id and lane (-1
	// without a key); owners reads lane and owner ('' for none).
	expire, laneOf, owners string
	// versions is produceVersions where f has no pgx pool.
	versions func(ctx context.Context, t *testing.T, topic string, producers, perProd, aggregates int)
}

// pgLanes is the PostgreSQL laneEnv of f (a pgx fixture).
func pgLanes(t *testing.T, f fixture) laneEnv {
	schema := f.schema(t)
	return laneEnv{
		f: f, target: "127.0.0.1:5432",
		relay: func(t *testing.T, proxy interface{ Addr() string }, pub txbox.Publisher, cfg relay.Config) (*relay.Relay, func()) {
			r, pool := laneRelayPool(t, schema, proxy, pub, cfg)
			return r, pool.Close
		},
		pairs: func(t *testing.T, q string) [][2]string {
			rows, err := f.pool.Query(context.Background(), q)
			testenv.Must(t, err, "query")
			defer rows.Close()
			return scanPairs(t, rows)
		},
		expire: "UPDATE txbox_outbox_lanes SET expires_at = now() - interval '1 second'",
		laneOf: "SELECT message_id, coalesce((hashtext(ordering_key) & 63)::smallint, -1)::text FROM txbox_outbox",
		owners: "SELECT lane::text, coalesce(owner, '') FROM txbox_outbox_lanes",
	}
}

// scanPairs reads rows of two text columns (pgx or database/sql rows).
func scanPairs(t *testing.T, rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}) [][2]string {
	t.Helper()
	var out [][2]string
	for rows.Next() {
		var r [2]string
		testenv.Must(t, rows.Scan(&r[0], &r[1]), "scan")
		out = append(out, r)
	}
	testenv.Must(t, rows.Err(), "rows")
	return out
}

// myLanes is a MySQL laneEnv on a database of its own.
func myLanes(t *testing.T, conns int) laneEnv {
	db := testenv.MySQL(t)
	f := sqlFixture(t, "mysql", db, txboxdriver.MySQL)
	var name string
	testenv.Must(t, db.QueryRow("SELECT DATABASE()").Scan(&name), "database")
	cfg, err := mysqldrv.ParseDSN(testenv.MySQLDSN())
	testenv.Must(t, err, "dsn")
	return laneEnv{
		f: f, target: cfg.Addr,
		relay: func(t *testing.T, proxy interface{ Addr() string }, pub txbox.Publisher, rc relay.Config) (*relay.Relay, func()) {
			c := cfg.Clone()
			c.DBName, c.ParseTime = name, true
			if proxy != nil {
				c.Net, c.Addr, c.Timeout = "tcp", proxy.Addr(), 2*time.Second
			}
			rdb, err := sql.Open("mysql", c.FormatDSN())
			testenv.Must(t, err, "open")
			rdb.SetMaxOpenConns(conns)
			if rc.PollInterval == 0 {
				rc.PollInterval = 5 * time.Millisecond
			}
			r, err := relay.New[*sql.Tx](txboxsql.New(rdb, txboxdriver.MySQL), pub, rc)
			if err != nil {
				_ = rdb.Close()
				t.Fatalf("relay.New: %v", err)
			}
			return r, func() { _ = rdb.Close() }
		},
		pairs: func(t *testing.T, q string) [][2]string {
			rows, err := db.Query(q)
			testenv.Must(t, err, "query")
			defer rows.Close()
			return scanPairs(t, rows)
		},
		expire: "UPDATE txbox_outbox_lanes SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
		laneOf: "SELECT message_id, CAST(COALESCE(lane, -1) AS CHAR) FROM txbox_outbox",
		owners: "SELECT CAST(lane AS CHAR), COALESCE(owner, '') FROM txbox_outbox_lanes",
		versions: func(ctx context.Context, t *testing.T, topic string, producers, perProd, aggregates int) {
			ob, err := txbox.New(txboxsql.New(db, txboxdriver.MySQL), txbox.Config{})
			testenv.Must(t, err, "txbox.New")
			var wg sync.WaitGroup
			for p := 0; p < producers; p++ {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, 99))
					for i := 0; i < perProd; i++ {
						agg := 1 + rng.IntN(aggregates)
						if err := addVersion(ctx, db, ob, topic, agg); err != nil {
							t.Errorf("producer: %v", err)
							return
						}
					}
				}(uint64(p))
			}
			wg.Wait()
		},
	}
}

// addVersion raises an aggregate's version and adds it to the outbox in
// one MySQL transaction.
func addVersion(ctx context.Context, db *sql.DB, ob *txbox.Outbox[*sql.Tx], topic string, agg int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "UPDATE aggregates SET version = version + 1 WHERE id = ?", agg); err != nil {
		return err
	}
	var v int
	if err := tx.QueryRowContext(ctx, "SELECT version FROM aggregates WHERE id = ?", agg).Scan(&v); err != nil {
		return err
	}
	if _, err := ob.Add(ctx, tx, txbox.Message{Topic: topic, Key: strconv.Itoa(agg), Payload: []byte(strconv.Itoa(agg) + ":" + strconv.Itoa(v))}); err != nil {
		return err
	}
	return tx.Commit()
}

// eachLaneDialect runs test as a parallel subtest on PostgreSQL and on
// MySQL, each on a database of its own.
func eachLaneDialect(t *testing.T, conns int, test func(t *testing.T, e laneEnv)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, pgLanes(t, pgxFixture(t, conns)))
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		test(t, myLanes(t, conns))
	})
}

// laneRelay is a relay with lanes on a pool of its own, through proxy when
// it is not nil.
func (e laneEnv) laneRelay(t *testing.T, proxy interface{ Addr() string }, pub txbox.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, closePool := e.relay(t, proxy, pub, cfg)
	t.Cleanup(closePool)
	return r
}

// laneRelayPool is a PostgreSQL relay with lanes on a pool of its own to
// schema, through proxy when it is not nil, and its pool, which the caller
// closes.
func laneRelayPool(t *testing.T, schema string, proxy interface{ Addr() string }, pub txbox.Publisher, cfg relay.Config) (*relay.Relay, *pgxpool.Pool) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(testenv.PostgresURL())
	testenv.Must(t, err, "parse")
	pc.ConnConfig.RuntimeParams["search_path"] = schema
	pc.MaxConns = 4
	if proxy != nil {
		host, port, _ := net.SplitHostPort(proxy.Addr())
		p, _ := strconv.Atoi(port)
		pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Fallbacks = host, uint16(p), nil
		pc.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	testenv.Must(t, err, "pool")
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	r, err := relay.New[pgx.Tx](txboxpgx.New(pool), pub, cfg)
	if err != nil {
		pool.Close()
		t.Fatalf("relay.New: %v", err)
	}
	return r, pool
}

// freezer forwards TCP connections to PostgreSQL and can freeze them: no
// byte passes either way until thaw, and nothing is closed (a relay whose
// host stalls, or a network that drops packets).
type freezer struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen chan struct{} // closed while not frozen
}

func newFreezer(t *testing.T) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	f := &freezer{ln: ln, frozen: make(chan struct{})}
	close(f.frozen)
	target := net.JoinHostPort("127.0.0.1", "5432")
	if u, err := pgx.ParseConfig(testenv.PostgresURL()); err == nil {
		target = net.JoinHostPort(u.Host, strconv.Itoa(int(u.Port)))
	}
	var conns []net.Conn
	var cmu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, up)
			cmu.Unlock()
			go f.pipe(up, c)
			go f.pipe(c, up)
		}
	}()
	t.Cleanup(func() {
		f.thaw()
		_ = ln.Close()
		cmu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		cmu.Unlock()
	})
	return f
}

func (f *freezer) Addr() string { return f.ln.Addr().String() }

func (f *freezer) gate() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen
}

func (f *freezer) pipe(dst io.WriteCloser, src io.ReadCloser) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		<-f.gate()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = make(chan struct{})
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.frozen:
	default:
		close(f.frozen)
	}
}

// laneOwners reads the lanes table: owner by lane.
func laneOwners(t *testing.T, e laneEnv) map[int16]string {
	out := map[int16]string{}
	for _, r := range e.pairs(t, e.owners) {
		lane, err := strconv.Atoi(r[0])
		testenv.Must(t, err, "lane")
		out[int16(lane)] = r[1]
	}
	return out
}

// disjointCover reports whether the relays' lanes are disjoint and cover
// all 64, each relay holding at most max.
func disjointCover(max int, rs ...*relay.Relay) bool {
	seen := map[int]bool{}
	for _, r := range rs {
		ls := testenv.RelayStats(r).Lanes
		if len(ls) > max {
			return false
		}
		for _, l := range ls {
			if seen[l] {
				return false
			}
			seen[l] = true
		}
	}
	return len(seen) == 64
}
