package txboxui

import (
	"strings"
	"testing"
	"time"
)

// The history is a ring: it keeps the newest Samples, oldest first, and
// the sparkline spans its width.
func TestHistoryRing(t *testing.T) {
	h, err := New(Config{Samples: 3})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1000, 0)
	var hist []Sample
	for i := range 5 {
		s := &State{At: at.Add(time.Duration(i) * time.Second), HasBacklog: true, Backlog: BacklogJSON{Pending: int64(10 * i)}}
		hist = h.appendSample(s)
	}
	if len(hist) != 3 || hist[0].Pending != 20 || hist[2].Pending != 40 {
		t.Fatalf("history %+v, want the last 3 samples oldest first", hist)
	}
	tp := throughput(hist)
	if tp.BacklogPerSec == nil || *tp.BacklogPerSec != 10 || tp.PublishedPerSec != nil {
		t.Fatalf("throughput %+v", tp)
	}
	pts := strings.Fields(spark(hist, "undelivered"))
	if len(pts) != 3 || !strings.HasPrefix(pts[0], "0.0,") || pts[2] != "240.0,1.0" {
		t.Fatalf("sparkline points %v", pts)
	}
	if got := age(125); got != "2m05s" {
		t.Fatalf("age(125) = %q", got)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{{Interval: -1}, {Relays: []RelayRef{{Name: "x"}}}, {Inboxes: []InboxRef{{Name: "x"}}}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
