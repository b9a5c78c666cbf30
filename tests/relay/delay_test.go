package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// stampPublisher records each payload it is given with the time it was
// given it, in order.
type stampPublisher struct {
	mu  sync.Mutex
	got []stamped
}

type stamped struct {
	payload string
	at      time.Time
}

func (p *stampPublisher) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, m := range msgs {
		p.got = append(p.got, stamped{string(m.Payload), now})
	}
	return make([]error, len(msgs))
}

// at returns when payload was first published, or false.
func (p *stampPublisher) at(payload string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.got {
		if s.payload == payload {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (p *stampPublisher) order() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, s := range p.got {
		out = append(out, s.payload)
	}
	return strings.Join(out, ",")
}

// holdUntil checks, until due by this process's clock, that none of
// payloads is published; the database shares the clock (local services).
func holdUntil(t *testing.T, p *stampPublisher, due time.Time, payloads ...string) {
	t.Helper()
	for time.Now().Before(due) {
		for _, pl := range payloads {
			if at, ok := p.at(pl); ok {
				t.Fatalf("%s published at %s, before its time %s", pl, at.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano))
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitPublished waits for payloads to be published, failing when the
// relay publishes nothing new for the stall (eventuallyState).
func waitPublished(t *testing.T, p *stampPublisher, payloads ...string) {
	t.Helper()
	testenv.Await(t, "published: "+strings.Join(payloads, ","), func() (bool, string) {
		for _, pl := range payloads {
			if _, ok := p.at(pl); !ok {
				return false, p.order()
			}
		}
		return true, ""
	})
}

// pendingState returns the inspector's row of payload's message id.
func pendingRow(t *testing.T, f fixture, id string) inspect.Row {
	t.Helper()
	rows, err := f.inspect(t).Pending(context.Background(), inspect.Filter{Limit: 1000})
	testenv.Must(t, err, "pending")
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("%s: no pending row %s", f.name, id)
	return inspect.Row{}
}

// A scheduled message (Add in a transaction, AddNoTx) is not published
// before its DeliverAt, shows as scheduled with its due time, counts in no
// backlog age before then, and is published after it; a message written
// with it without a schedule goes at once.
func TestDeliverAtNotBefore(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, f fixture) {
		// The checks of the scheduled state hold only while the rows are not
		// due: a machine too slow to make them in time tries again with a
		// schedule twice as far off.
		for in, try := 2*time.Second, 1; !deliverAtNotBefore(t, f, in, try); in, try = 2*in, try+1 {
			t.Logf("%s: try %d: the rows fell due (in %s) before their scheduled state was read: again, twice as far off", f.name, try, in)
		}
	})
}

// deliverAtNotBefore runs one try of TestDeliverAtNotBefore with rows due
// in in; it returns false when the scheduled state was read too late to
// check (the rows were due), having waited for the rows all the same.
func deliverAtNotBefore(t *testing.T, f fixture, in time.Duration, try int) bool {
	t.Helper()
	pub := &stampPublisher{}
	now, later, laterNoTx := fmt.Sprintf("now%d", try), fmt.Sprintf("later%d", try), fmt.Sprintf("later-notx%d", try)
	due := time.Now().Add(in)
	idTx, idNoTx := testenv.Name("later"), testenv.Name("later-notx")
	f.add(t, true, txbox.Message{Topic: "t", Payload: []byte(now)},
		txbox.Message{ID: idTx, Topic: "t", Payload: []byte(later), DeliverAt: due.In(time.FixedZone("X", 5*3600))})
	f.addNoTx(t, txbox.Message{ID: idNoTx, Topic: "t", Payload: []byte(laterNoTx), DeliverAt: due})
	r := f.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	startRelay(t, r)
	waitPublished(t, pub, now)

	rows, err := f.inspect(t).Pending(context.Background(), inspect.Filter{Limit: 1000})
	testenv.Must(t, err, "pending")
	b, err := f.inspect(t).Backlog(context.Background())
	testenv.Must(t, err, "backlog")
	inTime := time.Now().Before(due) // all of it was read before the rows fell due
	if inTime {
		for _, id := range []string{idTx, idNoTx} {
			row, ok := inspect.Row{}, false
			for _, r := range rows {
				if r.ID == id {
					row, ok = r, true
				}
			}
			if !ok {
				t.Errorf("%s: no pending row %s before its time", f.name, id)
			} else if row.State != inspect.Scheduled || row.NextAttemptAt.Before(due) || row.NextAttemptAt.Sub(due) >= time.Microsecond {
				t.Errorf("%s: row %s: state %s, due %s; want scheduled, due %s (to the µs, not earlier)", f.name, id, row.State,
					row.NextAttemptAt.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano))
			}
		}
		if b.Scheduled != 2 {
			t.Errorf("%s: backlog counts %d scheduled, want 2", f.name, b.Scheduled)
		}
		if b.OldestClaimableAge != 0 || b.OldestPendingAge != 0 {
			t.Errorf("%s: with only scheduled rows not due, oldest claimable age %s and oldest pending age %s, want 0",
				f.name, b.OldestClaimableAge, b.OldestPendingAge)
		}
	}

	holdUntil(t, pub, due, later, laterNoTx)
	waitPublished(t, pub, later, laterNoTx)
	for _, pl := range []string{later, laterNoTx} {
		if at, _ := pub.at(pl); at.Before(due) {
			t.Errorf("%s: %s published at %s, before %s", f.name, pl, at.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano))
		}
	}
	// The next try's rows are for its own relay.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Must(t, r.Stop(ctx), "stop relay")
	return inTime
}

// A scheduled keyed message holds its key: the key's later messages wait
// behind it and go after it, in order; other keys and unkeyed messages go
// at once.
func TestDeliverAtHoldsItsKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, f fixture) {
		pub := &stampPublisher{}
		due := time.Now().Add(2 * time.Second)
		f.add(t, true, txbox.Message{Topic: "t", Key: "k", Payload: []byte("k1"), DeliverAt: due})
		f.add(t, true, txbox.Message{Topic: "t", Key: "k", Payload: []byte("k2")})
		f.add(t, true, txbox.Message{Topic: "t", Key: "k", Payload: []byte("k3")},
			txbox.Message{Topic: "t", Key: "other", Payload: []byte("o1")},
			txbox.Message{Topic: "t", Payload: []byte("free")})
		r := f.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
		startRelay(t, r)
		waitPublished(t, pub, "o1", "free")
		holdUntil(t, pub, due, "k1", "k2", "k3")
		waitPublished(t, pub, "k1", "k2", "k3")
		var ks []string
		for _, pl := range strings.Split(pub.order(), ",") {
			if strings.HasPrefix(pl, "k") {
				ks = append(ks, pl)
			}
		}
		if got := strings.Join(ks, ","); got != "k1,k2,k3" {
			t.Fatalf("%s: key k published as %s, want k1,k2,k3 (all: %s)", f.name, got, pub.order())
		}
	})
}

// A plain-SQL writer schedules a row by setting next_attempt_at: it shows
// as scheduled and is not published before that time.
func TestPlainSQLScheduledRow(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, f fixture) {
		pub := &stampPublisher{}
		due := time.Now().Add(2 * time.Second).Truncate(time.Microsecond)
		id := testenv.Name("sql")
		var q string
		var at any
		switch f.dialect {
		case txboxdriver.Postgres:
			q, at = "INSERT INTO txbox_outbox (message_id, topic, payload, next_attempt_at) VALUES ($1, 't', 'sql', $2)", due
		case txboxdriver.MySQL:
			q, at = "INSERT INTO txbox_outbox (message_id, topic, payload, next_attempt_at) VALUES (?, 't', 'sql', ?)", due.UTC().Format("2006-01-02 15:04:05.000000")
		case txboxdriver.SQLite:
			q, at = "INSERT INTO txbox_outbox (message_id, topic, payload, next_attempt_at) VALUES (?, 't', CAST('sql' AS BLOB), ?)", due.UnixMicro()
		}
		f.exec(t, q, id, at)
		row := pendingRow(t, f, id) // no relay yet: the row is pending
		if !row.NextAttemptAt.Equal(due) {
			t.Errorf("%s: due %s, want %s", f.name, row.NextAttemptAt, due)
		}
		// It is scheduled when read before its time (a machine too slow to
		// read it by then cannot tell).
		if time.Now().Before(due) && row.State != inspect.Scheduled {
			t.Errorf("%s: state %s before its time, want scheduled", f.name, row.State)
		}
		r := f.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
		startRelay(t, r)
		holdUntil(t, pub, due, "sql")
		waitPublished(t, pub, "sql")
	})
}

// Cancel discards a message not yet delivered (in the caller's
// transaction: a rollback keeps it), and says why when it cannot: the
// message was delivered, is dead, or does not exist.
func TestCancel(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, f fixture) {
		pub := &stampPublisher{}
		later, soon, gone := testenv.Name("later"), testenv.Name("soon"), testenv.Name("dead")
		f.add(t, true, txbox.Message{ID: later, Topic: "t", Key: "k", Payload: []byte("later"), DeliverAt: time.Now().Add(time.Hour)},
			txbox.Message{ID: gone, Topic: "t", Payload: []byte("dead"), DeliverAt: time.Now().Add(time.Hour)})
		f.add(t, true, txbox.Message{Topic: "t", Key: "k", Payload: []byte("behind")})
		f.exec(t, fmt.Sprintf("UPDATE txbox_outbox SET dead_at = created_at WHERE message_id = '%s'", gone))

		if n, err := f.cancel(t, false, later); err != nil || n != 1 {
			t.Fatalf("%s: cancel rolled back: %d, %v; want 1, nil", f.name, n, err)
		}
		if n := f.count(t, fmt.Sprintf("message_id = '%s'", later)); n != 1 {
			t.Fatalf("%s: a rolled-back cancel left %d rows, want 1", f.name, n)
		}
		r := f.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
		startRelay(t, r)
		if f.dialect != txboxdriver.SQLite {
			// The relay meets the scheduled head of k first (and leaves k
			// out of its reads until it is due); the cancel must free k.
			var rounds int64
			eventually(t, "the relay claims from its lanes twice", func() bool {
				st := testenv.RelayStats(r)
				if len(st.Lanes) == 0 {
					return false
				}
				if rounds == 0 {
					rounds = st.Rounds
				}
				return st.Rounds >= rounds+2
			})
		}
		if n, err := f.cancel(t, true, later); err != nil || n != 1 {
			t.Fatalf("%s: cancel: %d, %v; want 1, nil", f.name, n, err)
		}
		if n := f.count(t, fmt.Sprintf("message_id = '%s'", later)); n != 0 {
			t.Fatalf("%s: cancel left %d rows", f.name, n)
		}
		// Its key goes on with the next message.
		waitPublished(t, pub, "behind")
		if _, err := f.cancel(t, true, later); !errors.Is(err, txbox.ErrMessageNotFound) {
			t.Errorf("%s: second cancel: %v, want ErrMessageNotFound", f.name, err)
		}
		if _, err := f.cancel(t, true, testenv.Name("never")); !errors.Is(err, txbox.ErrMessageNotFound) {
			t.Errorf("%s: cancel of an id never written: %v, want ErrMessageNotFound", f.name, err)
		}

		f.add(t, true, txbox.Message{ID: soon, Topic: "t", Payload: []byte("soon")})
		waitPublished(t, pub, "soon")
		eventually(t, "soon marked", func() bool {
			return f.count(t, fmt.Sprintf("message_id = '%s' AND published_at IS NOT NULL", soon)) == 1
		})
		if n, err := f.cancel(t, true, soon); !errors.Is(err, txbox.ErrDelivered) || n != 0 || !strings.Contains(err.Error(), "published at") {
			t.Errorf("%s: cancel after delivery: %d, %v; want ErrDelivered saying when", f.name, n, err)
		}
		if n, err := f.cancel(t, true, gone); !errors.Is(err, txbox.ErrMessageDead) || n != 0 {
			t.Errorf("%s: cancel of a dead message: %d, %v; want ErrMessageDead", f.name, n, err)
		}
		if n := f.count(t, fmt.Sprintf("message_id = '%s'", gone)); n != 1 {
			t.Errorf("%s: cancel of a dead message left %d rows, want it kept", f.name, n)
		}
		if _, ok := pub.at("later"); ok {
			t.Errorf("%s: the cancelled message was published", f.name)
		}
	})
}
