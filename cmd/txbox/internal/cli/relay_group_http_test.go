package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
)

// `txbox relay --stores FILE --http ADDR --ui` serves every store: /metrics
// has both stores' series (store="acme", store="globex"); /readyz has one
// check per store and, once globex's database is cut off, answers 503
// naming globex as failing and acme as ready, while /healthz stays ok; the
// dashboard lists both stores with their backlogs (dead rows put there by
// the test), ?store= leads to a store's own dashboard, and nothing served
// holds the databases' password.
func TestRelayGroupHTTPAndUI(t *testing.T) {
	t.Parallel()
	admin, s1 := pgSchema(t)
	_, s2 := pgSchema(t)
	testenv.NATS(t)
	pgURL := strings.Replace(testenv.PostgresURL(), "postgres@", "postgres:"+secret+"@", 1)
	u, err := url.Parse(pgURL)
	testenv.Must(t, err, "parse url")
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	globexURL := u.String()

	// A name the pages must escape.
	const globex, globexHTML = `glo<b>ex&"`, `glo&lt;b&gt;ex&amp;&#34;`
	dir := t.TempDir()
	file := filepath.Join(dir, "stores.json")
	testenv.Must(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"stores": [
		{"name": "acme", "db": %q, "schema": %q},
		{"name": %q, "db": %q, "schema": %q}
	]}`, pgURL, s1, globex, globexURL, s2)), 0o600), "write stores file")

	ctx := context.Background()
	r, prefix := startStoresRelay(t, file, "GRP")
	r.waitFor("both stores added", func() bool { return strings.Count(r.errOut.String(), `msg="store added"`) == 2 })
	for i, s := range []string{s1, s2} {
		for range 2 + i { // acme 2 dead rows, globex 3
			_, err := admin.Exec(ctx, `INSERT INTO `+s+`.txbox_outbox (topic, payload, dead_at) VALUES ($1, 'x', now())`, prefix+"dead")
			testenv.Must(t, err, "insert dead")
		}
		_, err := admin.Exec(ctx, `INSERT INTO `+s+`.txbox_outbox (topic, payload) VALUES ($1, 'y')`, prefix+"live")
		testenv.Must(t, err, "insert")
	}
	r.waitFor("/readyz 200", func() bool { code, _ := r.get("/readyz"); return code == http.StatusOK })
	r.waitFor("both stores' live rows delivered", func() bool {
		var n int
		testenv.Must(t, admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s1+`.txbox_outbox WHERE published_at IS NULL AND dead_at IS NULL)
			+ (SELECT count(*) FROM `+s2+`.txbox_outbox WHERE published_at IS NULL AND dead_at IS NULL)`).Scan(&n), "count")
		return n == 0
	})

	code, metrics := r.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics %d", code)
	}
	for _, store := range []string{"acme", `glo<b>ex&\"`} {
		if !strings.Contains(metrics, `txbox_relay_published_total{store="`+store+`",topic="`+prefix+`live"} 1`) {
			t.Fatalf("/metrics has no series of store %s:\n%s", store, metrics)
		}
	}

	// The store list shows each store's backlog.
	code, index := r.get("/ui/")
	if code != http.StatusOK {
		t.Fatalf("/ui/ %d:\n%s", code, index)
	}
	for _, c := range []struct {
		store string
		dead  int
	}{{"acme", 2}, {globexHTML, 3}} {
		row := index[strings.Index(index, `data-name="`+c.store+`"`)+1:]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, fmt.Sprintf(`<td class="dead">%d</td>`, c.dead)) || !strings.Contains(row, `<td class="pending">0</td>`) {
			t.Fatalf("/ui/ row of %s does not show 0 pending and %d dead:\n%s", c.store, c.dead, index)
		}
	}
	// ?store= leads to the store's own dashboard.
	if strings.Contains(index, globex) {
		t.Fatalf("/ui/ prints a store's name unescaped:\n%s", index)
	}
	code, page := r.get("/ui/?store=" + url.QueryEscape(globex))
	if code != http.StatusOK || !strings.Contains(page, `id="backlog"`) || !strings.Contains(page, `data-name="`+globexHTML+`"`) || strings.Contains(page, globex) {
		t.Fatalf("/ui/?store=globex %d is not globex's dashboard:\n%s", code, page)
	}
	_, state := r.get("/ui/store/1/api/state")
	var st struct {
		Title   string `json:"title"`
		Backlog struct {
			Dead int64 `json:"dead"`
		} `json:"backlog"`
	}
	testenv.Must(t, json.Unmarshal([]byte(state), &st), "api/state %s", state)
	if st.Title != globex || st.Backlog.Dead != 3 {
		t.Fatalf("store 1's state: %+v, want globex with 3 dead", st)
	}
	if code, _ := r.get("/ui/?store=nobody"); code != http.StatusNotFound {
		t.Fatalf("/ui/?store=nobody: %d, want 404", code)
	}

	// globex's database goes away: readiness names it, liveness holds.
	proxy.Cut()
	var ready struct {
		Ready  bool `json:"ready"`
		Checks []struct {
			Name  string `json:"name"`
			Ready bool   `json:"ready"`
			Error string `json:"error"`
		} `json:"checks"`
	}
	r.waitFor("/readyz 503 naming globex", func() bool {
		code, body := r.get("/readyz")
		if code != http.StatusServiceUnavailable {
			return false
		}
		testenv.Must(t, json.Unmarshal([]byte(body), &ready), "readyz %s", body)
		return true
	})
	got := map[string]bool{}
	for _, c := range ready.Checks {
		got[c.Name] = c.Ready
		if c.Name == globex && !strings.Contains(c.Error, "database unreachable") {
			t.Errorf("globex's check: %q, want database unreachable", c.Error)
		}
	}
	if len(got) != 2 || !got["acme"] || got[globex] {
		t.Fatalf("/readyz checks %+v, want acme ready and globex not", ready.Checks)
	}
	if code, body := r.get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz %d %q with one store down, want ok", code, body)
	}
	if _, index := r.get("/ui/"); !strings.Contains(index, "unavailable:") {
		t.Fatalf("/ui/ does not show globex as unavailable:\n%s", index)
	}
	proxy.Resume()
	r.stop()
	checkRedacted(t, "served pages", r.served.String(), `data-name="acme"`)
	checkRedacted(t, "relay output", r.out.String()+r.errOut.String(), "relay started")
}

// A store whose database is down when the relay starts holds up no other
// store: acme's message is relayed while globex's database refuses
// connections, /readyz names globex as waiting for its database, and the
// store list says so; a store whose database does not exist is left out
// (logged, and named in /readyz) without stopping the relay; once globex's
// database answers, its table is migrated and its message relayed too.
func TestRelayGroupStoreDownAtStart(t *testing.T) {
	t.Parallel()
	admin, s1 := pgSchema(t)
	_, s2 := pgSchema(t)
	testenv.NATS(t)
	pgURL := strings.Replace(testenv.PostgresURL(), "postgres@", "postgres:"+secret+"@", 1)
	u, err := url.Parse(pgURL)
	testenv.Must(t, err, "parse url")
	proxy := testenv.NewProxy(t, u.Host)
	proxy.Cut()
	u.Host = proxy.Addr()
	globexURL := u.String()
	u, _ = url.Parse(pgURL)
	u.Path = "/" + testenv.Name("nosuchdb")
	goneURL := u.String()

	dir := t.TempDir()
	file := filepath.Join(dir, "stores.json")
	testenv.Must(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"stores": [
		{"name": "acme", "db": %q, "schema": %q},
		{"name": "globex", "db": %q, "schema": %q},
		{"name": "gone", "db": %q}
	]}`, pgURL, s1, globexURL, s2, goneURL)), 0o600), "write stores file")

	ctx := context.Background()
	r, prefix := startStoresRelay(t, file, "GRPD")
	delivered := func(schema string) func() bool { return allDelivered(admin, schema) }
	r.waitFor("acme added", func() bool { return strings.Contains(r.errOut.String(), `msg="store added" store=acme`) })
	_, err = admin.Exec(ctx, `INSERT INTO `+s1+`.txbox_outbox (topic, payload) VALUES ($1, 'a')`, prefix+"acme")
	testenv.Must(t, err, "insert")
	r.waitFor("acme's row delivered while globex's database is down", delivered(s1))

	checks := func() map[string]string {
		code, body := r.get("/readyz")
		var ready struct {
			Checks []struct {
				Name  string `json:"name"`
				Ready bool   `json:"ready"`
				Error string `json:"error"`
			} `json:"checks"`
		}
		testenv.Must(t, json.Unmarshal([]byte(body), &ready), "readyz %d %s", code, body)
		got := map[string]string{}
		for _, c := range ready.Checks {
			got[c.Name] = c.Error
			if c.Ready {
				got[c.Name] = "ready"
			}
		}
		if (code == http.StatusOK) != (got["globex"] == "ready" && got["gone"] == "ready") {
			t.Fatalf("/readyz %d with checks %v", code, got)
		}
		return got
	}
	r.waitFor("globex named as waiting", func() bool {
		return strings.HasPrefix(checks()["globex"], "waiting for its database: connect to")
	})
	// (Waited for: a SIGHUP sent by another test of this process retries
	// gone, which is then opened once more before it is left out again.)
	r.waitFor("gone named as left out", func() bool {
		g := checks()["gone"]
		return strings.Contains(g, "not running until its store is set again") && strings.Contains(g, "does not exist")
	})
	got := checks()
	if got["acme"] != "ready" {
		t.Fatalf("/readyz checks %v: want acme ready", got)
	}
	if strings.Contains(got["globex"], "\n") {
		t.Errorf("globex's reason spans lines: %q", got["globex"])
	}
	_, index := r.get("/ui/")
	row := index[strings.Index(index, `data-name="globex"`):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "unavailable: waiting for its database") {
		t.Fatalf("/ui/ row of globex does not say it waits for its database:\n%s", row)
	}
	if code, page := r.get("/ui/store/1/"); code != http.StatusServiceUnavailable || !strings.Contains(page, "waiting for its database") {
		t.Fatalf("/ui/store/1/ (globex) %d %q, want 503 saying why", code, page)
	}
	if code, page := r.get("/ui/store/0/"); code != http.StatusOK || !strings.Contains(page, `id="backlog"`) {
		t.Fatalf("/ui/store/0/ (acme) %d, want its dashboard:\n%s", code, page)
	}
	storeStates := func(running, waiting, leftOut int) {
		t.Helper()
		r.waitFor(fmt.Sprintf("txbox_relay_stores %d running, %d waiting, %d left out", running, waiting, leftOut), func() bool {
			_, metrics := r.get("/metrics")
			for state, n := range map[string]int{"running": running, "waiting": waiting, "left_out": leftOut} {
				if !strings.Contains(metrics, fmt.Sprintf(`txbox_relay_stores{state=%q} %d`, state, n)) {
					return false
				}
			}
			return true
		})
	}
	storeStates(1, 1, 1)

	proxy.Resume()
	r.waitFor("globex added", func() bool { return checks()["globex"] == "ready" })
	storeStates(2, 0, 1)
	_, err = admin.Exec(ctx, `INSERT INTO `+s2+`.txbox_outbox (topic, payload) VALUES ($1, 'g')`, prefix+"globex")
	testenv.Must(t, err, "insert")
	r.waitFor("globex's row delivered", delivered(s2))
	if _, index := r.get("/ui/"); !strings.Contains(index, `<a href="store/1/">globex</a></td>
<td class="pending">0</td>`) {
		t.Fatalf("/ui/ does not show globex's backlog once it runs:\n%s", index)
	}
	r.stop()
	logs := r.errOut.String()
	for _, want := range []string{"unreachable; its stores wait for it, the others run", "stores left out", "database postgres://postgres:xxxxx@" + proxy.Addr()} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	checkRedacted(t, "served pages", r.served.String(), `data-name="acme"`)
	checkRedacted(t, "relay output", r.out.String()+logs, "relay started")
}

// A store left out because its table is not migrated joins at the next
// SIGHUP once it is, the file unchanged.
func TestRelayGroupReloadRetriesLeftOut(t *testing.T) {
	t.Parallel()
	admin, s1 := pgSchema(t)
	_, s2 := pgSchema(t)
	testenv.NATS(t)
	pgURL := strings.Replace(testenv.PostgresURL(), "postgres@", "postgres:"+secret+"@", 1)
	mustRun(t, "migrate", "up", "--db", pgURL, "--schema", s1)
	file := filepath.Join(t.TempDir(), "stores.json")
	testenv.Must(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"stores": [
		{"name": "acme", "db": %q, "schema": %q},
		{"name": "globex", "db": %q, "schema": %q}
	]}`, pgURL, s1, pgURL, s2)), 0o600), "write stores file")
	prefix := testenv.Subject()
	r := startGroupRelay(t, "--stores", file, "--broker", testenv.NATSURL(),
		"--stream", strings.ToUpper(testenv.Name("GRPL")), "--stream-subjects", prefix+">", "--poll-interval", "50ms")
	r.waitFor("acme added, globex left out", func() bool {
		return strings.Contains(r.errOut.String(), `msg="store added" store=acme`) && strings.Contains(r.errOut.String(), "stores left out")
	})
	mustRun(t, "migrate", "up", "--db", pgURL, "--schema", s2)
	testenv.Must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP), "SIGHUP")
	r.waitFor("globex added", func() bool { return strings.Contains(r.errOut.String(), `msg="store added" store=globex`) })
	_, err := admin.Exec(context.Background(), `INSERT INTO `+s2+`.txbox_outbox (topic, payload) VALUES ($1, 'g')`, prefix+"g")
	testenv.Must(t, err, "insert")
	r.waitFor("globex's row delivered", allDelivered(admin, s2))
	r.stop()
}

// A relay whose every store is left out (no database exists) exits with
// an error naming each store and why.
func TestRelayGroupNoStoreCanRun(t *testing.T) {
	t.Parallel()
	testenv.NATS(t)
	u, err := url.Parse(strings.Replace(testenv.PostgresURL(), "postgres@", "postgres:"+secret+"@", 1))
	testenv.Must(t, err, "parse url")
	u.Path = "/" + testenv.Name("nosuchdb")
	gone := u.String()
	u.Path = "/" + testenv.Name("nosuchdb")
	gone2 := u.String()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut testenv.Buffer
	err = cli.Run(ctx, []string{"relay", "--db", gone, "--db", gone2,
		"--broker", testenv.NATSURL(), "--stream", strings.ToUpper(testenv.Name("GRPN")), "--stream-subjects", testenv.Subject() + ">"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "no store can run") || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("relay: %v, want no store can run as the database does not exist\n%s", err, errOut.String())
	}
	checkRedacted(t, "relay error", err.Error()+out.String()+errOut.String(), "no store can run")
}

// SIGHUP reads --stores again: a store removed leaves (its readiness check
// and series go), a store added joins and relays, a store unchanged runs
// on without a restart, a store left out (its database does not exist)
// joins once its entry is fixed; a file that does not load is refused and
// leaves the stores as they were. A store left out is also tried again at
// each reload (TestRelayGroupReloadRetriesLeftOut).
func TestRelayGroupReloadStores(t *testing.T) {
	t.Parallel()
	admin, s1 := pgSchema(t)
	_, s2 := pgSchema(t)
	_, s3 := pgSchema(t)
	_, s4 := pgSchema(t)
	testenv.NATS(t)
	pgURL := strings.Replace(testenv.PostgresURL(), "postgres@", "postgres:"+secret+"@", 1)
	dir := t.TempDir()
	file := filepath.Join(dir, "stores.json")
	u, err := url.Parse(pgURL)
	testenv.Must(t, err, "parse url")
	u.Path = "/" + testenv.Name("nosuchdb")
	goneURL := u.String()
	write := func(stores ...[3]string) { // name, db, schema
		t.Helper()
		var b strings.Builder
		b.WriteString(`{"stores": [`)
		for i, s := range stores {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"name": %q, "db": %q, "schema": %q}`, s[0], s[1], s[2])
		}
		b.WriteString("]}")
		testenv.Must(t, os.WriteFile(file, []byte(b.String()), 0o600), "write stores file")
	}
	write([3]string{"acme", pgURL, s1}, [3]string{"globex", pgURL, s2}, [3]string{"gone", goneURL, ""})

	ctx := context.Background()
	r, prefix := startStoresRelay(t, file, "GRPR")
	delivered := func(schema string) func() bool { return allDelivered(admin, schema) }
	insert := func(schema string) {
		t.Helper()
		_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.txbox_outbox (topic, payload) VALUES ($1, 'x')`, prefix+"t")
		testenv.Must(t, err, "insert into %s", schema)
	}
	checks := func() []string {
		_, body := r.get("/readyz")
		var ready struct {
			Checks []struct {
				Name string `json:"name"`
			} `json:"checks"`
		}
		testenv.Must(t, json.Unmarshal([]byte(body), &ready), "readyz %s", body)
		var names []string
		for _, c := range ready.Checks {
			names = append(names, c.Name)
		}
		return names
	}
	hup := func() {
		t.Helper()
		testenv.Must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP), "SIGHUP")
	}
	r.waitFor("two stores added, one left out", func() bool {
		return strings.Count(r.errOut.String(), `msg="store added"`) == 2 && strings.Contains(r.errOut.String(), "stores left out")
	})
	insert(s1)
	insert(s2)
	r.waitFor("both stores' rows delivered", func() bool { return delivered(s1)() && delivered(s2)() })

	// globex leaves, initech joins, acme stays, gone's entry is fixed.
	write([3]string{"acme", pgURL, s1}, [3]string{"initech", pgURL, s3}, [3]string{"gone", pgURL, s4})
	hup()
	r.waitFor("initech and gone added", func() bool {
		return strings.Contains(r.errOut.String(), `msg="store added" store=initech`) && strings.Contains(r.errOut.String(), `msg="store added" store=gone`)
	})
	if got := checks(); strings.Join(got, ",") != "acme,initech,gone" {
		t.Fatalf("/readyz checks %v after the reload, want acme,initech,gone", got)
	}
	insert(s3)
	insert(s1)
	insert(s4)
	r.waitFor("initech's, acme's and gone's rows delivered", func() bool { return delivered(s3)() && delivered(s1)() && delivered(s4)() })
	if n := strings.Count(r.errOut.String(), `msg="store added" store=acme`); n != 1 {
		t.Fatalf("acme was added %d times, want once (it did not change)", n)
	}
	_, metrics := r.get("/metrics")
	if strings.Contains(metrics, `store="globex"`) || !strings.Contains(metrics, `store="initech"`) {
		t.Fatalf("/metrics after globex left and initech joined:\n%s", metrics)
	}
	if _, index := r.get("/ui/"); strings.Contains(index, "globex") || !strings.Contains(index, `data-name="initech"`) {
		t.Fatalf("/ui/ after the reload:\n%s", index)
	}

	// A file that does not load changes nothing.
	testenv.Must(t, os.WriteFile(file, []byte(`{"stores": [`), 0o600), "write a broken file")
	hup()
	r.waitFor("the bad reload refused", func() bool { return strings.Contains(r.errOut.String(), "reload of --stores refused") })
	if got := checks(); strings.Join(got, ",") != "acme,initech,gone" {
		t.Fatalf("/readyz checks %v after a refused reload, want acme,initech,gone", got)
	}
	insert(s3)
	r.waitFor("initech's row delivered after the refused reload", delivered(s3))

	r.stop()
	checkRedacted(t, "relay output", r.out.String()+r.errOut.String(), "reloaded --stores")
}

// startStoresRelay runs `txbox relay --migrate --stores FILE --ui` on the
// test NATS server, into a stream of its own named after tag; topics are
// to start with the prefix it returns.
func startStoresRelay(t *testing.T, file, tag string) (*groupRelay, string) {
	t.Helper()
	prefix := testenv.Subject()
	return startGroupRelay(t, "--migrate", "--stores", file, "--ui", "--broker", testenv.NATSURL(),
		"--stream", strings.ToUpper(testenv.Name(tag)), "--stream-subjects", prefix+">", "--poll-interval", "50ms"), prefix
}

// allDelivered returns the condition that schema's outbox holds no
// undelivered row.
func allDelivered(admin *pgxpool.Pool, schema string) func() bool {
	return func() bool {
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM `+schema+`.txbox_outbox WHERE published_at IS NULL`).Scan(&n)
		return err == nil && n == 0
	}
}

// groupRelay is `txbox relay` run in the background with --http on a free
// port, for the tests of a relay with several stores.
type groupRelay struct {
	t           *testing.T
	addr        string
	out, errOut testenv.Buffer
	served      strings.Builder // every page served, to check for passwords
	cancel      context.CancelFunc
	done        chan error
}

// startGroupRelay runs `txbox relay ARGS --http ADDR`; the relay is
// stopped when the test ends if stop was not called.
func startGroupRelay(t *testing.T, args ...string) *groupRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	r := &groupRelay{t: t, addr: ln.Addr().String(), done: make(chan error, 1)}
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(cancel)
	args = append(append([]string{"relay"}, args...), "--http", r.addr)
	go func() { r.done <- cli.Run(ctx, args, &r.out, &r.errOut) }()
	return r
}

// get fetches path from the relay's --http address.
func (r *groupRelay) get(path string) (int, string) {
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r.served.Write(b)
	return resp.StatusCode, string(b)
}

// waitFor polls cond, failing the test if the relay exits first, or once
// the relay's stderr (the progress shown) stayed the same for
// testenv.Stall while cond does not hold.
func (r *groupRelay) waitFor(what string, cond func() bool) {
	r.t.Helper()
	testenv.Await(r.t, what, func() (bool, string) {
		select {
		case err := <-r.done:
			r.t.Fatalf("relay exited waiting for %s: %v\n%s", what, err, r.errOut.String())
		default:
		}
		return cond(), "stderr:\n" + r.errOut.String()
	})
}

// stop stops the relay and fails the test unless it exits cleanly.
func (r *groupRelay) stop() {
	r.t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		testenv.Must(r.t, err, "relay")
	case <-time.After(30 * time.Second):
		r.t.Fatal("relay did not stop")
	}
}
