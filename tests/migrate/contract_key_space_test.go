package migrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// A table migrated before contract_key_space may hold rows with
// an empty ordering_key and topics with white space the earlier rules let pass
// (U+3000). The migration succeeds: pending rows' empty keys become NULL,
// pending rows with such a topic are parked dead (on SQLite by the relay,
// when it claims them), and published rows are left as they are.
func TestContractKeySpaceMigratesTableWithBadRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, x := range databases(t) {
		t.Run(string(x.d), func(t *testing.T) {
			m, err := migrate.New(txboxsql.New(x.db, x.d), migrate.Config{})
			testenv.Must(t, err, "migrate.New")
			v := version(t, x.d, "contract_key_space")
			_, err = m.UpTo(ctx, v-1)
			testenv.Must(t, err, "up to %d", v-1)
			insert(t, x, "topic, ordering_key, payload", "t", "", []byte("empty key"))
			insert(t, x, "topic, payload", "a\u3000b", []byte("U+3000 topic"))
			now := any(time.Now().UTC())
			if x.d == driver.SQLite {
				now = time.Now().UnixMicro()
			}
			insert(t, x, "topic, ordering_key, payload, published_at", "a\u3000b", "", []byte("published"), now)
			insert(t, x, "topic, payload, dead_at", "a\u3000b", []byte("dead topic"), now)
			insert(t, x, "topic, ordering_key, payload, dead_at", "t", "", []byte("dead key"), now)

			applied, err := m.Up(ctx)
			testenv.Must(t, err, "up on a table with bad rows")
			if len(applied) != 1 || applied[0].Name != "contract_key_space" {
				t.Fatalf("Up applied %+v, want the contract_key_space migration", applied)
			}
			count := func(where string) int {
				var n int
				testenv.Must(t, x.db.QueryRowContext(ctx, "SELECT count(*) FROM txbox_outbox WHERE "+where).Scan(&n), "count %s", where)
				return n
			}
			if n := count("ordering_key = ''"); n != 2 {
				t.Errorf("%d rows with ordering_key '', want 2 (the published and the dead one)", n)
			}
			if n := count("ordering_key IS NULL"); n != 3 {
				t.Errorf("%d rows with ordering_key NULL, want 3", n)
			}
			parked := 1
			if x.d == driver.SQLite {
				parked = 0
			}
			if n := count("dead_at IS NOT NULL AND last_error = 'invalid row: topic contains white space or a control character'"); n != parked {
				t.Errorf("the migration parked %d rows, want %d", n, parked)
			}
			if n := count("published_at IS NOT NULL AND dead_at IS NULL"); n != 1 {
				t.Errorf("%d published rows, want 1", n)
			}
			if x.d == driver.Postgres {
				for _, r := range []string{"topic_chars", "ordering_key_length"} {
					testenv.Must(t, exec(ctx, x.db, x.d, "ALTER TABLE txbox_outbox VALIDATE CONSTRAINT txbox_outbox_"+r), "validate %s", r)
				}
			}
			// The new rules hold from now on, for each column alone.
			if err := exec(ctx, x.db, x.d, "INSERT INTO txbox_outbox (topic, ordering_key, payload) VALUES (?, ?, ?)", "t", "", []byte("p")); err == nil {
				t.Error("INSERT of ordering_key '' accepted")
			}
			if err := exec(ctx, x.db, x.d, "INSERT INTO txbox_outbox (topic, payload) VALUES (?, ?)", "a\u3000b", []byte("p")); err == nil {
				t.Error("INSERT of a topic with U+3000 accepted")
			}
			// And a redrive of a dead row that breaks them (SQLite: the
			// contract_redrive trigger).
			if err := exec(ctx, x.db, x.d, "UPDATE txbox_outbox SET dead_at = NULL WHERE ordering_key = '' AND dead_at IS NOT NULL"); err == nil {
				t.Error("redrive of a dead row with ordering_key '' accepted")
			}
			if err := exec(ctx, x.db, x.d, "UPDATE txbox_outbox SET dead_at = NULL WHERE last_error IS NULL AND dead_at IS NOT NULL AND ordering_key IS NULL"); err == nil {
				t.Error("redrive of a dead row with a topic with U+3000 accepted")
			}
		})
	}
}
