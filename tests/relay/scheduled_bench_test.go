package relay_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// countPublisher acknowledges every message and counts them.
type countPublisher struct{ n atomic.Int64 }

func (p *countPublisher) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.n.Add(int64(len(msgs)))
	return nil
}

// TestDrainBesideScheduledRows measures one relay's drain of a backlog
// with rows scheduled an hour ahead written before it (lower ids), on
// PostgreSQL, MySQL / MariaDB or SQLite, into a publisher that
// acknowledges at once. A measurement, not a check: it asserts nothing and
// runs only with TXBOX_BENCH=scheduled
// (docs/benchmarks/2026-12-07-delayed-delivery.md has the figures); one
// drain per run, so that test binaries of two commits can be run in turns:
//
//	TXBOX_BENCH=scheduled TXBOX_BENCH_DIALECT=mysql TXBOX_BENCH_SCHEDULED=100000 CI=true \
//	  go test -count=1 -run TestDrainBesideScheduledRows -v ./relay/
//
// TXBOX_BENCH_DIALECT is postgres, mysql (default) or sqlite;
// TXBOX_BENCH_ROWS the backlog (default 20000, no keys);
// TXBOX_BENCH_SCHEDULED the rows scheduled ahead (default 0);
// TXBOX_BENCH_BATCH the batch size (default 100). The scheduled rows are
// written by plain SQL (next_attempt_at an hour ahead, as the SQL contract
// lets a writer schedule a row), so that the same file runs against code
// from before Message.DeliverAt.
func TestDrainBesideScheduledRows(t *testing.T) {
	if os.Getenv("TXBOX_BENCH") != "scheduled" {
		t.Skip("a measurement: set TXBOX_BENCH=scheduled to run it")
	}
	env := func(name string, def int) int {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			testenv.Must(t, err, "%s", name)
			return n
		}
		return def
	}
	rows, scheduled, batch := env("TXBOX_BENCH_ROWS", 20000), env("TXBOX_BENCH_SCHEDULED", 0), env("TXBOX_BENCH_BATCH", 100)
	var f fixture
	var due string // an hour from now, in the dialect's SQL
	switch d := os.Getenv("TXBOX_BENCH_DIALECT"); d {
	case "postgres":
		f, due = pgxFixture(t, 4), "now() + interval '1 hour'"
	case "", "mysql":
		f, due = sqlFixture(t, "mysql", testenv.MySQL(t), txboxdriver.MySQL), "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR"
	case "sqlite":
		f, due = sqlFixture(t, "sqlite", testenv.SQLite(t), txboxdriver.SQLite), "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + 3600000000"
	default:
		t.Fatalf("TXBOX_BENCH_DIALECT %q: want postgres, mysql or sqlite", d)
	}
	for done := 0; done < scheduled; {
		n := min(1000, scheduled-done)
		row := "('bench.scheduled', '{}', " + due + ")"
		f.exec(t, "INSERT INTO txbox_outbox (topic, payload, next_attempt_at) VALUES "+strings.TrimSuffix(strings.Repeat(row+",", n), ","))
		done += n
	}
	for done := 0; done < rows; {
		msgs := make([]txbox.Message, min(1000, rows-done))
		for i := range msgs {
			msgs[i] = txbox.Message{Topic: "bench.orders", Payload: []byte(`{"n":` + strconv.Itoa(done+i) + `}`)}
		}
		f.addNoTx(t, msgs...)
		done += len(msgs)
	}
	pub := &countPublisher{}
	r := f.newRelay(t, pub, relay.Config{BatchSize: batch, PollInterval: 10 * time.Millisecond})
	ctx := context.Background()
	start := time.Now()
	testenv.Must(t, r.Start(ctx), "start relay")
	last, since := int64(-1), time.Now()
	for pub.n.Load() < int64(rows) {
		if n := pub.n.Load(); n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > time.Minute {
			t.Fatalf("%d of %d rows published, none for a minute", last, rows)
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = r.Stop(sctx)
	t.Logf("DRAIN %s rows=%d scheduled=%d batch=%d: %.0f rows/s", f.name, rows, scheduled, batch, float64(rows)/took.Seconds())
}
