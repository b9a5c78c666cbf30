package migrate_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// onWarn is a slog.Handler that calls f at each warning.
type onWarn struct{ f func(slog.Record) }

func (h onWarn) Enabled(context.Context, slog.Level) bool { return true }
func (h onWarn) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		h.f(r)
	}
	return nil
}
func (h onWarn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onWarn) WithGroup(string) slog.Handler      { return h }

// holdTable opens a transaction on a connection of its own that adds a
// row to the outbox table and stays open, as an application's transaction
// that has not committed yet: it holds the table against DDL. It returns
// what ends it.
func holdTable(t *testing.T, n namespace) (end func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := n.db.Conn(ctx)
	testenv.Must(t, err, "holder's connection")
	tx, err := conn.BeginTx(ctx, nil)
	testenv.Must(t, err, "holder's transaction")
	table := "txbox_outbox"
	if n.d == txboxdriver.Postgres {
		_, err = tx.ExecContext(ctx, "SET application_name = 'report-job'")
		testenv.Must(t, err, "application_name")
		table = n.schema + "." + table
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+" (message_id, topic, payload) VALUES ('held', 't', 'p')")
	testenv.Must(t, err, "holder's insert")
	var once sync.Once
	end = func() {
		once.Do(func() {
			_ = tx.Rollback()
			_ = conn.Close()
		})
	}
	t.Cleanup(end)
	return end
}

func lockMigrator(t *testing.T, n namespace, cfg txboxmigrate.Config) *txboxmigrate.Migrator {
	t.Helper()
	cfg.Schema = n.schema
	m, err := txboxmigrate.New(txboxsql.New(n.db, n.d), cfg)
	testenv.Must(t, err, "txboxmigrate.New")
	return m
}

// TestMigrationGivesUpOnABusyTable: a migration that needs its table while
// another session's transaction uses it waits LockTimeout, not for as long
// as that transaction lasts (all the while holding up every later writer
// of the table), tries again LockRetries times, then fails with
// ErrLockTimeout naming the holder (PostgreSQL), having changed nothing;
// and it goes on once the table is free.
func TestMigrationGivesUpOnABusyTable(t *testing.T) {
	t.Parallel()
	for _, d := range []txboxdriver.Dialect{txboxdriver.Postgres, txboxdriver.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			n := namespaces(t, d)[0]
			if d == txboxdriver.MySQL {
				// The holder's connection and one more: the check of the
				// session setting below reads the migrator's connection.
				n.db.SetMaxOpenConns(2)
			}
			quiet := slog.New(slog.DiscardHandler)
			_, err := lockMigrator(t, n, txboxmigrate.Config{Logger: quiet}).Up(ctx)
			testenv.Must(t, err, "up")
			down := txboxmigrate.DownOptions{To: 0, Force: true}
			timeout := 100 * time.Millisecond
			if d == txboxdriver.MySQL {
				timeout = time.Second // lock_wait_timeout counts whole seconds
			}

			end := holdTable(t, n)
			m := lockMigrator(t, n, txboxmigrate.Config{LockTimeout: timeout, LockRetries: 1, Logger: quiet})
			reverted, err := m.Down(ctx, down)
			if !errors.Is(err, txboxmigrate.ErrLockTimeout) {
				t.Fatalf("Down beside a transaction holding the table: %v (reverted %d); want ErrLockTimeout", err, len(reverted))
			}
			t.Logf("Down beside the holder: %v", err)
			if !strings.Contains(err.Error(), "2 time(s)") {
				t.Errorf("error %q: want it to say it tried twice (LockRetries 1)", err)
			}
			if d == txboxdriver.Postgres && !strings.Contains(err.Error(), `"report-job"`) {
				t.Errorf("error %q: want it to name the holder's application", err)
			}
			if got := reverted; len(got) != 0 {
				t.Errorf("Down reverted %v beside the holder", got)
			}
			for _, s := range mustStatus(t, m) {
				if strings.HasPrefix(s.Target, "outbox:") && s.AppliedAt.IsZero() {
					t.Errorf("outbox migration %d reverted beside the holder", s.Version)
				}
			}
			if d == txboxdriver.MySQL {
				var session, global int64
				testenv.Must(t, n.db.QueryRowContext(ctx, "SELECT @@SESSION.lock_wait_timeout, @@GLOBAL.lock_wait_timeout").Scan(&session, &global), "lock_wait_timeout")
				if session != global {
					t.Errorf("the migrator's connection went back to the pool with lock_wait_timeout %d, the server's is %d", session, global)
				}
			}

			// The holder ends after the first timeout: the next try goes on.
			var warned []string
			var mu sync.Mutex
			m = lockMigrator(t, n, txboxmigrate.Config{LockTimeout: timeout, LockRetries: 3, Logger: slog.New(onWarn{func(r slog.Record) {
				mu.Lock()
				warned = append(warned, r.Message)
				mu.Unlock()
				end()
			}})})
			if _, err := m.Down(ctx, down); err != nil {
				t.Fatalf("Down once the holder ended: %v", err)
			}
			for _, s := range mustStatus(t, m) {
				if strings.HasPrefix(s.Target, "outbox:") && !s.AppliedAt.IsZero() {
					t.Errorf("%s migration %d not reverted", s.Target, s.Version)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(warned) != 1 {
				t.Errorf("warnings %q, want one, at the first timeout", warned)
			}
		})
	}
}

func mustStatus(t *testing.T, m *txboxmigrate.Migrator) []txboxmigrate.Status {
	t.Helper()
	st, err := m.Status(context.Background())
	testenv.Must(t, err, "status")
	return st
}
