package relay_test

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
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
func (l *sendLog) checkLanes(t *testing.T, pool *pgxpool.Pool, want map[string]int) int {
	t.Helper()
	ctx := context.Background()
	// The lane of a keyed row, as the claims compute it; -1 without a key
	// (any relay may send those).
	rows, err := pool.Query(ctx, "SELECT message_id, coalesce((hashtext(ordering_key) & 15)::smallint, -1) FROM txbox_outbox")
	testenv.Must(t, err, "lanes")
	laneOf := map[string]int16{}
	for rows.Next() {
		var id string
		var lane int16
		testenv.Must(t, rows.Scan(&id, &lane), "scan")
		laneOf[id] = lane
	}
	testenv.Must(t, rows.Err(), "rows")

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

// laneRelay is a relay with lanes on a pool of its own to schema, through
// proxy when it is not nil.
func laneRelay(t *testing.T, schema string, proxy interface{ Addr() string }, pub txbox.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, pool := laneRelayPool(t, schema, proxy, pub, cfg)
	t.Cleanup(pool.Close)
	return r
}

// laneRelayPool is laneRelay, and the relay's pool, which the caller closes.
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
	cfg.Lanes = true
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
func laneOwners(t *testing.T, pool *pgxpool.Pool) map[int16]string {
	rows, err := pool.Query(context.Background(), "SELECT lane, coalesce(owner, '') FROM txbox_outbox_lanes")
	testenv.Must(t, err, "lanes")
	out := map[int16]string{}
	for rows.Next() {
		var lane int16
		var owner string
		testenv.Must(t, rows.Scan(&lane, &owner), "scan")
		out[lane] = owner
	}
	testenv.Must(t, rows.Err(), "rows")
	return out
}

// disjointCover reports whether the relays' lanes are disjoint and cover
// all 16, each relay holding at most max.
func disjointCover(max int, rs ...*relay.Relay) bool {
	seen := map[int]bool{}
	for _, r := range rs {
		ls := r.Lanes()
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
	return len(seen) == 16
}
