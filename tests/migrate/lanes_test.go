package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// dropLanes undoes the lanes migration by hand: the table is as a release
// before lanes left it.
func dropLanes(t *testing.T, x dialectDB) {
	stmts := []string{"DROP TABLE txbox_outbox_lanes", "DROP TABLE txbox_outbox_relays"}
	if x.d == driver.MySQL {
		stmts = append(stmts, "DROP TABLE txbox_outbox_fences", "ALTER TABLE txbox_outbox DROP COLUMN lane")
	}
	undoMigration(t, x, "lanes", stmts...)
}

// The lanes migration runs on a table that already holds rows, pending
// (keyed and not), delivered and dead: on MySQL each row gets its lane
// (CRC32 of its key & 15, NULL without a key) from the virtual column, and
// a relay with lanes then delivers every pending row, each key's in order,
// and nothing else.
func TestLanesMigratesTableWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, x := range databases(t) {
		if x.d == driver.SQLite {
			continue // no lanes: one writer (docs/guide/scaling.md)
		}
		t.Run(string(x.d), func(t *testing.T) {
			m := up(t, x)
			dropLanes(t, x)
			keys := []string{"alice", "bob", "carol", "日本"}
			var want []string
			for i := range 3 {
				for _, k := range keys {
					p := fmt.Sprintf("%s-%d", k, i)
					insert(t, x, "topic, ordering_key, payload", "t", k, []byte(p))
					want = append(want, p)
				}
			}
			for i := range 2 {
				p := fmt.Sprintf("unkeyed-%d", i)
				insert(t, x, "topic, payload", "t", []byte(p))
				want = append(want, p)
			}
			now := time.Now().UTC()
			insert(t, x, "topic, ordering_key, payload, published_at", "t", "alice", []byte("delivered before"), now)
			insert(t, x, "topic, ordering_key, payload, dead_at", "t", "dave", []byte("dead before"), now)

			applied, err := m.Up(ctx)
			testenv.Must(t, err, "up on a table with rows")
			if len(applied) != 1 || applied[0].Name != "lanes" {
				t.Fatalf("Up applied %+v, want the lanes migration", applied)
			}
			if x.d == driver.MySQL {
				checkLanes(t, x.db)
			}

			pub := &drivertest.Recorder{}
			r, err := relay.New(txboxsql.New(x.db, x.d), pub, relay.Config{Lanes: true, PollInterval: 10 * time.Millisecond, DisableNotify: true})
			testenv.Must(t, err, "relay")
			testenv.Must(t, r.Start(ctx), "start")
			deadline := time.Now().Add(30 * time.Second)
			for len(pub.Published()) < len(want) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			testenv.Must(t, r.Stop(ctx), "stop")
			var got []string
			perKey := map[string][]string{}
			for _, msg := range pub.Published() {
				got = append(got, string(msg.Payload))
				perKey[msg.Key] = append(perKey[msg.Key], string(msg.Payload))
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("published %v, want %v", got, want)
			}
			for _, k := range keys {
				if w := []string{k + "-0", k + "-1", k + "-2"}; !slices.Equal(perKey[k], w) {
					t.Errorf("key %s published in the order %v, want %v", k, perKey[k], w)
				}
			}
		})
	}
}

// checkLanes compares each row's lane with CRC32(ordering_key) & 15.
func checkLanes(t *testing.T, db *sql.DB) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SELECT ordering_key, lane FROM txbox_outbox")
	testenv.Must(t, err, "read lanes")
	defer rows.Close()
	n := 0
	for rows.Next() {
		var key sql.NullString
		var lane sql.NullInt64
		testenv.Must(t, rows.Scan(&key, &lane), "scan")
		n++
		switch {
		case !key.Valid && lane.Valid:
			t.Errorf("a row without a key has lane %d, want NULL", lane.Int64)
		case key.Valid && (!lane.Valid || lane.Int64 != int64(crc32.ChecksumIEEE([]byte(key.String))&15)):
			t.Errorf("key %q: lane %v, want %d", key.String, lane, crc32.ChecksumIEEE([]byte(key.String))&15)
		}
	}
	testenv.Must(t, rows.Err(), "rows")
	if n != 16 {
		t.Fatalf("%d rows, want 16", n)
	}
}
