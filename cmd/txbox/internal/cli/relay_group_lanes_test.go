package cli_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
)

// `txbox relay --db A --db B` (two MySQL databases, a group of two
// stores with lanes) delivers every keyed row of both, and each store holds
// all 64 of its table's lanes.
func TestRelayGroupWithLanesDeliversKeyedRows(t *testing.T) {
	t.Parallel()
	testenv.NATS(t)
	var dbs []*sql.DB
	args := []string{"relay", "--migrate",
		"--broker", testenv.NATSURL(), "--stream", strings.ToUpper(testenv.Name("GLN")), "--poll-interval", "50ms", "--stats-interval", "0"}
	prefix := testenv.Subject()
	args = append(args, "--stream-subjects", prefix+">")
	for range 2 {
		db := testenv.MySQL(t)
		var name string
		testenv.Must(t, db.QueryRow("SELECT DATABASE()").Scan(&name), "database name")
		dbs = append(dbs, db)
		args = append(args, "--db", "mysql://root@127.0.0.1:3306/"+name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx, args, &out, &errOut) }()
	testenv.Await(t, "2 stores added", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("relay exited early: %v\n%s", err, errOut.String())
		default:
		}
		return strings.Count(errOut.String(), `msg="store added"`) >= 2, "stderr:\n" + errOut.String()
	})
	const keys, perKey = 20, 5
	for i := range perKey {
		for k := range keys {
			for _, db := range dbs {
				_, err := db.Exec(`INSERT INTO txbox_outbox (topic, ordering_key, payload) VALUES (?, ?, ?)`,
					prefix+"keyed", fmt.Sprint("k", k), fmt.Sprintf("k%d:%d", k, i))
				testenv.Must(t, err, "insert")
			}
		}
	}
	left := func() (n int) {
		for _, db := range dbs {
			var l int
			testenv.Must(t, db.QueryRow(`SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL`).Scan(&l), "count")
			n += l
		}
		return n
	}
	// Progress-bounded: fail when no row was delivered for 30s.
	last, lastAt := left(), time.Now()
	for last > 0 {
		select {
		case err := <-done:
			t.Fatalf("relay exited: %v\n%s", err, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if n := left(); n < last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > 30*time.Second {
			t.Fatalf("%d keyed rows left, none delivered for 30s\n%s", n, errOut.String())
		}
	}
	for i, db := range dbs {
		var owners, lanes int
		testenv.Must(t, db.QueryRow("SELECT count(DISTINCT owner), count(owner) FROM txbox_outbox_lanes WHERE expires_at > UTC_TIMESTAMP(6)").Scan(&owners, &lanes), "lanes")
		if owners != 1 || lanes != 64 {
			t.Errorf("store %d: %d lanes held by %d owners, want all 64 by one", i, lanes, owners)
		}
	}
	cancel()
	select {
	case err := <-done:
		testenv.Must(t, err, "relay")
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop")
	}
}
