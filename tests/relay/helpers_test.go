package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox/relay"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// fixture is one database with a migrated outbox, whatever the driver.
type fixture struct {
	name string
	// add writes msgs in a transaction that commits when commit is true.
	add     func(t *testing.T, commit bool, msgs ...txbox.Message)
	addNoTx func(t *testing.T, msgs ...txbox.Message)
	exec    func(t *testing.T, sql string, args ...any) int64
	// tryExec runs a statement and returns its error (a refused INSERT).
	tryExec func(sql string) error
	// count returns how many outbox rows match the SQL condition where.
	count    func(t *testing.T, where string) int64
	newRelay func(t *testing.T, pub txbox.Publisher, cfg relay.Config) *relay.Relay
	dialect  txboxdriver.Dialect

	// dead returns the dead-letter operations on this outbox.
	dead func(t *testing.T) *dead.Letters
	// inspect returns an inspector of this outbox.
	inspect func(t *testing.T) *inspect.Inspector
	// cancel is Outbox.Cancel in a transaction that commits when commit
	// is true.
	cancel func(t *testing.T, commit bool, id string) (int, error)

	pool   *pgxpool.Pool // pgx fixture only
	outbox *txbox.Outbox[pgx.Tx]
}

// schema returns the fixture's PostgreSQL schema (pgx fixture only).
func (f fixture) schema(t *testing.T) string {
	var s string
	testenv.Must(t, f.pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&s), "schema")
	return s
}

func letters[TTx any](t *testing.T, drv txboxdriver.Driver[TTx]) *dead.Letters {
	l, err := dead.New(drv, txbox.Config{})
	testenv.Must(t, err, "dead.New")
	return l
}

func inspector[TTx any](t *testing.T, drv txboxdriver.Driver[TTx]) *inspect.Inspector {
	in, err := inspect.New(drv, txbox.Config{})
	testenv.Must(t, err, "inspect.New")
	return in
}

func migrateUp[TTx any](t testing.TB, drv txboxdriver.Driver[TTx]) {
	t.Helper()
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
}

func pgxFixture(t testing.TB, maxConns int) fixture {
	pool, _ := testenv.Postgres(t, maxConns)
	drv := txboxpgx.New(pool)
	migrateUp(t, drv)
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	ctx := context.Background()
	return fixture{
		name:    "pgx",
		dialect: txboxdriver.Postgres,
		pool:    pool,
		outbox:  ob,
		dead:    func(t *testing.T) *dead.Letters { return letters(t, drv) },
		inspect: func(t *testing.T) *inspect.Inspector { return inspector(t, ob) },
		cancel: func(t *testing.T, commit bool, id string) (int, error) {
			tx, err := pool.Begin(ctx)
			testenv.Must(t, err, "begin")
			n, err := ob.Cancel(ctx, tx, id)
			if commit {
				testenv.Must(t, tx.Commit(ctx), "commit")
			} else {
				testenv.Must(t, tx.Rollback(ctx), "rollback")
			}
			return n, err
		},
		count: func(t *testing.T, where string) int64 {
			var n int64
			testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM txbox_outbox WHERE "+where).Scan(&n), "count")
			return n
		},
		add: func(t *testing.T, commit bool, msgs ...txbox.Message) {
			tx, err := pool.Begin(ctx)
			testenv.Must(t, err, "begin")
			testenv.Must(t, testenv.Err(ob.Add(ctx, tx, msgs...)), "add")
			if commit {
				testenv.Must(t, tx.Commit(ctx), "commit")
			} else {
				testenv.Must(t, tx.Rollback(ctx), "rollback")
			}
		},
		addNoTx: func(t *testing.T, msgs ...txbox.Message) {
			testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, msgs...)), "add")
		},
		tryExec: func(sql string) error { _, err := pool.Exec(ctx, sql); return err },
		exec: func(t *testing.T, sql string, args ...any) int64 {
			tag, err := pool.Exec(ctx, sql, args...)
			testenv.Must(t, err, "exec %s", sql)
			return tag.RowsAffected()
		},
		newRelay: func(t *testing.T, pub txbox.Publisher, cfg relay.Config) *relay.Relay {
			r, err := relay.New[pgx.Tx](drv, pub, cfg)
			testenv.Must(t, err, "relay.New")
			return r
		},
	}
}

func sqlFixture(t *testing.T, name string, db *sql.DB, d txboxdriver.Dialect) fixture {
	drv := txboxsql.New(db, d)
	migrateUp(t, drv)
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	ctx := context.Background()
	return fixture{
		name:    name,
		dialect: d,
		dead:    func(t *testing.T) *dead.Letters { return letters(t, drv) },
		inspect: func(t *testing.T) *inspect.Inspector { return inspector(t, ob) },
		cancel: func(t *testing.T, commit bool, id string) (int, error) {
			tx, err := db.BeginTx(ctx, nil)
			testenv.Must(t, err, "begin")
			n, err := ob.Cancel(ctx, tx, id)
			if commit {
				testenv.Must(t, tx.Commit(), "commit")
			} else {
				testenv.Must(t, tx.Rollback(), "rollback")
			}
			return n, err
		},
		count: func(t *testing.T, where string) int64 {
			var n int64
			testenv.Must(t, db.QueryRowContext(ctx, "SELECT count(*) FROM txbox_outbox WHERE "+where).Scan(&n), "count")
			return n
		},
		add: func(t *testing.T, commit bool, msgs ...txbox.Message) {
			tx, err := db.BeginTx(ctx, nil)
			testenv.Must(t, err, "begin")
			testenv.Must(t, testenv.Err(ob.Add(ctx, tx, msgs...)), "add")
			if commit {
				testenv.Must(t, tx.Commit(), "commit")
			} else {
				testenv.Must(t, tx.Rollback(), "rollback")
			}
		},
		addNoTx: func(t *testing.T, msgs ...txbox.Message) {
			testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, msgs...)), "add")
		},
		tryExec: func(q string) error { _, err := db.ExecContext(ctx, q); return err },
		exec: func(t *testing.T, q string, args ...any) int64 {
			res, err := db.ExecContext(ctx, q, args...)
			testenv.Must(t, err, "exec %s", q)
			n, _ := res.RowsAffected()
			return n
		},
		newRelay: func(t *testing.T, pub txbox.Publisher, cfg relay.Config) *relay.Relay {
			r, err := relay.New[*sql.Tx](drv, pub, cfg)
			testenv.Must(t, err, "relay.New")
			return r
		},
	}
}

// eachDriver runs test as a parallel subtest once per supported driver and
// dialect, each on a database of its own.
func eachDriver(t *testing.T, test func(t *testing.T, f fixture)) {
	for _, c := range []struct {
		name string
		mk   func(t *testing.T) fixture
	}{
		{"pgx", func(t *testing.T) fixture { return pgxFixture(t, 8) }},
		{"sql_postgres", func(t *testing.T) fixture {
			db, _ := testenv.PostgresDB(t, 8)
			return sqlFixture(t, "database/sql postgres", db, txboxdriver.Postgres)
		}},
		{"sqlite", func(t *testing.T) fixture { return sqlFixture(t, "sqlite", testenv.SQLite(t), txboxdriver.SQLite) }},
		{"mysql", func(t *testing.T) fixture { return sqlFixture(t, "mysql", testenv.MySQL(t), txboxdriver.MySQL) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			test(t, c.mk(t))
		})
	}
}

// stream creates a JetStream stream capturing prefix+">" and deletes it when
// the test ends. dupWindow 0 means the server's default (2 minutes).
func stream(t *testing.T, nc *nats.Conn, prefix string, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	cfg.Name = testenv.Name("TXBOX")
	cfg.Subjects = []string{prefix + ">"}
	s, err := js.CreateStream(ctx, cfg)
	testenv.Must(t, err, "create stream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Name) })
	return s
}

func publisher(t *testing.T, nc *nats.Conn) txbox.Publisher {
	p, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	return p
}

// streamIDs reads every message of s and returns how many carry each value
// of the header (Nats-Msg-Id: the message id).
func streamIDs(t *testing.T, s jetstream.Stream, header string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := s.Info(ctx)
	testenv.Must(t, err, "stream info")
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "consumer")
	ids := map[string]int{}
	for n := uint64(0); n < info.State.Msgs; {
		batch, err := c.FetchNoWait(500)
		testenv.Must(t, err, "fetch")
		got := 0
		for m := range batch.Messages() {
			ids[m.Headers().Get(header)]++
			got++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("fetch: %v", err)
		}
		n += uint64(got)
		if got == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d stream messages", n, info.State.Msgs)
		}
	}
	return ids
}

// eventually waits for cond (testenv.Await with nothing to show).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Await(t, what, func() (bool, string) { return cond(), "" })
}

func streamMsgs(t *testing.T, s jetstream.Stream) uint64 {
	info, err := s.Info(context.Background())
	testenv.Must(t, err, "stream info")
	return info.State.Msgs
}

func pending(t *testing.T, r *relay.Relay) int64 {
	st, err := r.Stats(context.Background())
	testenv.Must(t, err, "stats")
	return st.Pending
}

func startRelay(t *testing.T, r *relay.Relay) {
	testenv.Must(t, r.Start(context.Background()), "start relay")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
	})
}
