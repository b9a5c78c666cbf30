package drivertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
)

// testInspect prepares a row in each state (a dead row and the row of its
// key it parks, a retrying row, two pending rows) and checks what
// inspect.Backlog, Pending and Show report of them.
func (s *suite[TTx]) testInspect(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	add(t, drv, ob, true,
		txbox.Message{ID: "poison", Topic: "t", Key: "k", Payload: []byte("\x00poison"), Headers: map[string]string{"h": "v"}},
		txbox.Message{ID: "parked", Topic: "t", Key: "k", Payload: []byte("k2")},
	)
	// MaxAttempts 1: poison dies at its first rejection, parking k.
	pub := &Recorder{Reject: func(m txbox.Message) bool { return m.ID == "poison" || m.ID == "flaky" }}
	drain(t, newRelay(t, drv, pub, relay.Config{MaxAttempts: 1}))
	// flaky is rejected once and waits minutes for its next attempt (1h,
	// capped).
	add(t, drv, ob, true, txbox.Message{ID: "flaky", Topic: "f", Payload: []byte("f")})
	drain(t, newRelay(t, drv, pub, relaytest.With(relay.Config{MaxAttempts: 5}, relaytest.Config{RetryDelay: time.Hour})))
	add(t, drv, ob, true,
		txbox.Message{ID: "fresh1", Topic: "u", Payload: []byte("u1")},
		txbox.Message{ID: "fresh2", Topic: "u", Key: "j", Payload: []byte("u2")},
	)

	in, err := inspect.New(drv, txbox.Config{})
	must(t, err, "inspect.New")
	b, err := in.Backlog(ctx)
	must(t, err, "backlog")
	if b.Pending != 2 || b.Retrying != 1 || b.Parked != 1 || b.Dead != 1 || b.ParkedKeys != 1 || b.Undelivered() != 5 {
		t.Fatalf("backlog %+v, want 2 pending, 1 retrying, 1 parked, 1 dead, 1 parked key", b)
	}
	// The oldest pending row is the parked one, older than the oldest
	// claimable row (fresh1: flaky is not due).
	if b.OldestPendingAge <= 0 || b.OldestClaimableAge <= 0 || b.OldestClaimableAge > b.OldestPendingAge {
		t.Fatalf("backlog ages: oldest pending %s, oldest claimable %s", b.OldestPendingAge, b.OldestClaimableAge)
	}
	want := []inspect.TopicCount{{Topic: "t", Undelivered: 2, Dead: 1}, {Topic: "u", Undelivered: 2}, {Topic: "f", Undelivered: 1}}
	if !slices.Equal(b.Topics, want) {
		t.Fatalf("backlog topics %+v, want %+v", b.Topics, want)
	}

	states := func(rows []inspect.Row) string {
		var out []string
		for _, r := range rows {
			out = append(out, r.ID+":"+string(r.State))
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		f    inspect.Filter
		want string
	}{
		{inspect.Filter{}, "parked:parked,flaky:retrying,fresh1:pending,fresh2:pending"},
		{inspect.Filter{Dead: true}, "poison:dead,parked:parked,flaky:retrying,fresh1:pending,fresh2:pending"},
		{inspect.Filter{Topic: "u"}, "fresh1:pending,fresh2:pending"},
		{inspect.Filter{Key: "k", Dead: true}, "poison:dead,parked:parked"},
		{inspect.Filter{MinAttempts: 1, Dead: true}, "poison:dead,flaky:retrying"},
		{inspect.Filter{Limit: 2}, "parked:parked,flaky:retrying"},
		{inspect.Filter{Topic: "none"}, ""},
	} {
		rows, err := in.Pending(ctx, c.f)
		must(t, err, "pending")
		if got := states(rows); got != c.want {
			t.Errorf("Pending(%+v) = %s, want %s", c.f, got, c.want)
		}
	}
	rows, err := in.Pending(ctx, inspect.Filter{MinAttempts: 1})
	must(t, err, "pending")
	flaky := rows[0]
	if flaky.Attempts != 1 || !strings.Contains(flaky.LastError, "rejects flaky") || time.Until(flaky.NextAttemptAt) < 2*time.Minute ||
		flaky.Age <= 0 || flaky.CreatedAt.IsZero() || flaky.Invalid != "" {
		t.Fatalf("retrying row %+v: want 1 attempt, the last error, the next attempt minutes away (RetryDelay 1h, capped at 5m)", flaky)
	}
	if _, err := in.Pending(ctx, inspect.Filter{Limit: -1}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("Pending with Limit -1: %v, want ErrInvalidConfig", err)
	}

	all, err := in.Pending(ctx, inspect.Filter{Dead: true})
	must(t, err, "pending")
	m, err := in.Show(ctx, all[0].Seq)
	must(t, err, "show dead")
	if m.ID != "poison" || m.State != inspect.Dead || string(m.Payload) != "\x00poison" || m.Headers["h"] != "v" ||
		m.Attempts != 1 || m.DeadAt.IsZero() || !strings.Contains(m.LastError, "rejects poison") || m.Key != "k" {
		t.Fatalf("show dead %+v", m)
	}
	m, err = in.Show(ctx, all[4].Seq)
	must(t, err, "show pending")
	if m.ID != "fresh2" || m.State != inspect.Pending || string(m.Payload) != "u2" || len(m.Headers) != 0 || m.Attempts != 0 || !m.NextAttemptAt.IsZero() {
		t.Fatalf("show pending %+v", m)
	}
	if _, err := in.Show(ctx, all[4].Seq+1000); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("show of an unknown seq: %v, want ErrNotFound", err)
	}
	if _, err := in.Show(ctx, 0); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("show 0: %v, want ErrInvalidConfig", err)
	}
}
