package drivertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/relay"
)

// longReject refuses every message with an error of 1,000 two-byte
// characters.
type longReject struct{}

func (longReject) Publish(_ context.Context, msgs []txbox.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = txbox.Reject(errors.New(strings.Repeat("é", 1000)))
	}
	return errs
}

// testDeadBrief: dead.Brief reads each text value cut to BriefChars
// characters (at a character's end) with its full length in bytes; Get
// reads one dead message whole, and no row that is not dead.
func (s *suite[TTx]) testDeadBrief(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	add(t, drv, ob, true, txbox.Message{ID: "long-error", Topic: "t", Key: "k", Payload: []byte("p1")})
	r := newRelay(t, drv, longReject{}, relay.Config{MaxAttempts: 1})
	_, err := r.Round(ctx)
	must(t, err, "round")
	letters, err := dead.New(drv, txbox.Config{})
	must(t, err, "dead.New")
	full, err := letters.List(ctx, 10)
	must(t, err, "list dead")
	brief, err := letters.Brief(ctx, 10)
	must(t, err, "brief dead")
	if len(full) != 1 || len(brief) != 1 {
		t.Fatalf("List %d, Brief %d dead messages, want 1", len(full), len(brief))
	}
	f, b := full[0], brief[0]
	if utf8.RuneCountInString(f.LastError) <= dead.BriefChars {
		t.Fatalf("the stored error is %d characters, not longer than BriefChars", utf8.RuneCountInString(f.LastError))
	}
	if b.Seq != f.Seq || b.ID != f.ID || b.Topic != f.Topic || b.Key != f.Key || b.Parked != f.Parked ||
		utf8.RuneCountInString(b.LastError) != dead.BriefChars || !strings.HasPrefix(f.LastError, b.LastError) || !utf8.ValidString(b.LastError) ||
		b.Bytes != (dead.Bytes{ID: int64(len(f.ID)), Topic: int64(len(f.Topic)), Key: int64(len(f.Key)), LastError: int64(len(f.LastError))}) {
		t.Fatalf("Brief %+v, List %+v", b, f)
	}
	m, err := letters.Get(ctx, f.Seq)
	must(t, err, "get dead")
	if m.Seq != f.Seq || m.ID != f.ID || m.LastError != f.LastError || string(m.Payload) != "p1" || m.DeadAt.IsZero() {
		t.Fatalf("Get %+v, want %+v with payload p1", m, f)
	}
	add(t, drv, ob, true, txbox.Message{ID: "alive", Topic: "t", Key: "k", Payload: []byte("p2")})
	for _, seq := range []int64{f.Seq + 1, f.Seq + 1000} {
		if _, err := letters.Get(ctx, seq); !errors.Is(err, dead.ErrNotFound) {
			t.Errorf("Get(%d), not a dead message: %v, want ErrNotFound", seq, err)
		}
	}
}
