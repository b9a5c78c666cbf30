package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/supervise"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxtest"
)

// superviseEnv is a Supervisor's world in a test: tenants (outbox tables
// in schemas of the test database) reached through named databases whose
// Open the test lets fail or succeed.
type superviseEnv struct {
	t       *testing.T
	pub     txbox.Publisher
	tenants map[string]tenant // by store name

	mu     sync.Mutex
	refuse map[string]error // database → the error its Open returns
	opens  map[string]int   // database → successful Opens
	tries  map[string]int   // database → Opens
	closes map[string]int   // database → Closes
}

func newSuperviseEnv(t *testing.T, n int) (*superviseEnv, []tenant) {
	pool, _ := testenv.Postgres(t, 8)
	tenants := pgTenants(t, pool, testenv.Subject(), n)
	e := &superviseEnv{t: t, pub: txboxtest.NewBroker(txboxtest.BrokerConfig{}), tenants: map[string]tenant{},
		refuse: map[string]error{}, opens: map[string]int{}, tries: map[string]int{}, closes: map[string]int{}}
	return e, tenants
}

// store makes tn a store named after it on database db.
func (e *superviseEnv) store(tn tenant, db string) supervise.Store {
	e.tenants[tn.name] = tn
	return supervise.Store{Name: tn.name, Database: db}
}

func (e *superviseEnv) config(stores ...supervise.Store) supervise.Config {
	return supervise.Config{
		Stores:     stores,
		Open:       e.open,
		Retryable:  func(err error) bool { return !errors.Is(err, errForGood) },
		RetryFirst: time.Millisecond, RetryMax: 20 * time.Millisecond,
	}
}

var errForGood = errors.New("password authentication failed")

func (e *superviseEnv) open(_ context.Context, db string) (supervise.Database, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tries[db]++
	if err := e.refuse[db]; err != nil {
		return nil, err
	}
	e.opens[db]++
	return &testDB{e: e, name: db}, nil
}

func (e *superviseEnv) count(m map[string]int, db string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return m[db]
}

type testDB struct {
	e    *superviseEnv
	name string
}

func (d *testDB) Relay(s supervise.Store) (*relay.Relay, error) {
	return d.e.tenants[s.Name].newRelay(d.e.t, d.e.pub, relay.Config{PollInterval: 50 * time.Millisecond}), nil
}
func (d *testDB) Transient(err error) bool { return txboxdriver.IsTransient(err) }
func (d *testDB) Close() error {
	d.e.mu.Lock()
	defer d.e.mu.Unlock()
	d.e.closes[d.name]++
	return nil
}

// states renders the supervisor's stores: name=state, in order.
func states(sup *supervise.Supervisor) string {
	var out []string
	for _, st := range sup.States() {
		out = append(out, st.Store.Name+"="+st.State.String())
	}
	return strings.Join(out, " ")
}

// awaitDelivered waits until tn's rows are all published.
func awaitDelivered(t *testing.T, tn tenant) {
	t.Helper()
	testenv.Await(t, tn.name+" delivered", func() (bool, string) {
		n := tn.pending(t)
		return n == 0, fmt.Sprintf("%d pending", n)
	})
}

// Two stores on one database and one on another run in one group: each
// database is opened once, every row is delivered, and a second Start
// after Stop reuses the open databases; Close closes each once.
func TestSupervisorRunsEveryStore(t *testing.T) {
	t.Parallel()
	e, tn := newSuperviseEnv(t, 3)
	sup, err := supervise.New(e.config(e.store(tn[0], "db1"), e.store(tn[1], "db1"), e.store(tn[2], "db2")))
	testenv.Must(t, err, "supervise.New")
	ctx := context.Background()
	for _, x := range tn {
		x.add(t, 5)
	}
	testenv.Must(t, sup.Start(ctx), "start")
	if err := sup.Start(ctx); !errors.Is(err, relay.ErrAlreadyStarted) {
		t.Fatalf("a second Start: %v, want relay.ErrAlreadyStarted", err)
	}
	testenv.Await(t, "every store running", func() (bool, string) {
		s := states(sup)
		return strings.Count(s, "=running") == 3, s
	})
	for _, x := range tn {
		awaitDelivered(t, x)
	}
	testenv.Must(t, sup.Stop(ctx), "stop")
	if err := sup.Err(); err != nil {
		t.Fatalf("Err after Stop: %v", err)
	}
	if s := states(sup); strings.Contains(s, "=running") {
		t.Fatalf("stores still running after Stop: %s", s)
	}
	for _, x := range tn {
		x.add(t, 3)
	}
	testenv.Must(t, sup.Start(ctx), "start again")
	for _, x := range tn {
		awaitDelivered(t, x)
	}
	testenv.Must(t, sup.Close(), "close")
	for _, db := range []string{"db1", "db2"} {
		if o, c := e.count(e.opens, db), e.count(e.closes, db); o != 1 || c != 1 {
			t.Errorf("%s opened %d times and closed %d times, want once each", db, o, c)
		}
	}
}

// A database down at start holds up its own store only: the other runs
// and delivers; the first joins once its database opens. A database that
// refuses for good leaves its store out, with the reason; when every store
// is left out the supervisor stops by itself with ErrNoStoreRuns.
func TestSupervisorStoreDownAtStart(t *testing.T) {
	t.Parallel()
	e, tn := newSuperviseEnv(t, 3)
	e.refuse["down"] = errors.New("connection refused")
	e.refuse["bad"] = fmt.Errorf("connect: %w", errForGood)
	sup, err := supervise.New(e.config(e.store(tn[0], "up"), e.store(tn[1], "down"), e.store(tn[2], "bad")))
	testenv.Must(t, err, "supervise.New")
	defer sup.Close()
	for _, x := range tn {
		x.add(t, 4)
	}
	testenv.Must(t, sup.Start(context.Background()), "start")
	awaitDelivered(t, tn[0])
	testenv.Await(t, "the down database tried again, the bad one left out", func() (bool, string) {
		s := states(sup)
		return e.count(e.tries, "down") >= 3 && strings.Contains(s, tn[2].name+"=left_out"), s
	})
	for _, st := range sup.States() {
		switch st.Store.Name {
		case tn[1].name:
			if st.State != supervise.Waiting || st.Err == nil || !strings.Contains(st.Err.Error(), "connection refused") {
				t.Errorf("store on the down database: %v %v, want waiting for it", st.State, st.Err)
			}
		case tn[2].name:
			if !errors.Is(st.Err, errForGood) {
				t.Errorf("store on the bad database: %v, want its Open error", st.Err)
			}
		}
	}
	if n := tn[1].pending(t); n != 4 {
		t.Fatalf("%d rows of the down database's store pending, want 4", n)
	}
	e.mu.Lock()
	delete(e.refuse, "down")
	e.mu.Unlock()
	awaitDelivered(t, tn[1])
	if e.count(e.tries, "bad") != 1 {
		t.Errorf("the bad database was tried %d times, want once", e.count(e.tries, "bad"))
	}

	// Every store left out: the supervisor stops.
	e.mu.Lock()
	e.refuse["up"], e.refuse["down"] = errForGood, errForGood
	e.mu.Unlock()
	sup2, err := supervise.New(e.config(e.store(tn[0], "up"), e.store(tn[1], "down")))
	testenv.Must(t, err, "supervise.New")
	defer sup2.Close()
	testenv.Must(t, sup2.Start(context.Background()), "start")
	<-sup2.Stopped()
	if err := sup2.Err(); !errors.Is(err, supervise.ErrNoStoreRuns) || !errors.Is(err, errForGood) {
		t.Fatalf("Err: %v, want ErrNoStoreRuns with each store's reason", err)
	}
}

// SetStores while running: a store removed leaves the group (its rows stay
// pending) and its database, used by no store, is closed; a store added
// joins; a store left out is tried again when listed again; an unchanged
// store keeps its relay.
func TestSupervisorSetStores(t *testing.T) {
	t.Parallel()
	e, tn := newSuperviseEnv(t, 4)
	e.refuse["bad"] = errForGood
	keep, gone, late, fixed := e.store(tn[0], "db1"), e.store(tn[1], "db2"), e.store(tn[2], "db1"), e.store(tn[3], "bad")
	sup, err := supervise.New(e.config(keep, gone, fixed))
	testenv.Must(t, err, "supervise.New")
	defer sup.Close()
	ctx := context.Background()
	testenv.Must(t, sup.Start(ctx), "start")
	testenv.Await(t, "two stores running, one left out", func() (bool, string) {
		s := states(sup)
		return strings.Count(s, "=running") == 2 && strings.Contains(s, fixed.Name+"=left_out"), s
	})
	kept := sup.Relay(keep.Name)

	e.mu.Lock()
	delete(e.refuse, "bad")
	e.mu.Unlock()
	testenv.Must(t, sup.SetStores(ctx, []supervise.Store{fixed, late, keep}), "SetStores")
	testenv.Await(t, "the new list running", func() (bool, string) {
		s := states(sup)
		return s == fixed.Name+"=running "+late.Name+"=running "+keep.Name+"=running", s
	})
	if sup.Relay(keep.Name) != kept {
		t.Error("the unchanged store's relay was replaced")
	}
	if sup.Relay(gone.Name) != nil {
		t.Error("the removed store still has a relay")
	}
	if c := e.count(e.closes, "db2"); c != 1 {
		t.Errorf("the removed store's database closed %d times, want once", c)
	}
	tn[1].add(t, 2)
	for _, x := range []tenant{tn[0], tn[2], tn[3]} {
		x.add(t, 3)
		awaitDelivered(t, x)
	}
	if n := tn[1].pending(t); n != 2 {
		t.Errorf("the removed store: %d rows pending, want its 2 left alone", n)
	}
	if err := sup.SetStores(ctx, []supervise.Store{keep, keep}); err == nil || !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("SetStores with two stores of one name: %v, want ErrInvalidConfig", err)
	}
	if got := slices.Collect(func(yield func(string) bool) {
		for _, st := range sup.States() {
			if !yield(st.Store.Name) {
				return
			}
		}
	}); len(got) != 3 {
		t.Errorf("a refused list changed the stores: %v", got)
	}
}

// Prepare runs on each store's table before it joins; a transient failure
// is tried again, any other leaves the store out.
func TestSupervisorPrepare(t *testing.T) {
	t.Parallel()
	e, tn := newSuperviseEnv(t, 2)
	var mu sync.Mutex
	tries := map[string]int{}
	cfg := e.config(e.store(tn[0], "db"), e.store(tn[1], "db"))
	cfg.Prepare = func(_ context.Context, _ supervise.Database, s supervise.Store) error {
		mu.Lock()
		defer mu.Unlock()
		tries[s.Name]++
		switch {
		case s.Name == tn[0].name && tries[s.Name] < 3:
			return fmt.Errorf("migrate: %w", sql.ErrConnDone)
		case s.Name == tn[1].name:
			return errors.New("migrate: permission denied for schema")
		}
		return nil
	}
	sup, err := supervise.New(cfg)
	testenv.Must(t, err, "supervise.New")
	defer sup.Close()
	tn[0].add(t, 2)
	testenv.Must(t, sup.Start(context.Background()), "start")
	awaitDelivered(t, tn[0])
	testenv.Await(t, "the store whose table cannot be prepared left out", func() (bool, string) {
		s := states(sup)
		return strings.Contains(s, tn[1].name+"=left_out"), s
	})
	mu.Lock()
	defer mu.Unlock()
	if tries[tn[0].name] != 3 || tries[tn[1].name] != 1 {
		t.Errorf("Prepare tries %v, want 3 for the transient failure, 1 for the other", tries)
	}
}
