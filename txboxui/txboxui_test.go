package txboxui

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/relay"
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

// The table's upkeep (PostgreSQL) shows as two cards and in api/state when
// the backlog source reads it, the oldest transaction marked past 10
// minutes; nothing of it shows without it.
func TestUpkeepCards(t *testing.T) {
	for _, c := range []struct {
		upkeep            *Upkeep
		cards, warn, json bool
	}{
		{nil, false, false, false},
		{&Upkeep{OldestTransactionAge: 3 * time.Second, DeadRows: 42}, true, false, true},
		{&Upkeep{OldestTransactionAge: 11 * time.Minute, DeadRows: 9000}, true, true, true},
	} {
		h, err := New(Config{Backlog: func(context.Context) (Backlog, error) {
			return Backlog{Pending: 1, ParkedKeys: -1, Upkeep: c.upkeep}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) string {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", path, nil)
			req.Host = "127.0.0.1:8080"
			h.ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Fatalf("GET %s: %d", path, rec.Code)
			}
			return rec.Body.String()
		}
		page, state := get("/"), get("/api/state")
		card := regexp.MustCompile(`<div class="card( warn)?"[^>]*><span class="label">oldest snapshot</span>`).FindStringSubmatch(page)
		if (card != nil) != c.cards || strings.Contains(page, "row versions to vacuum") != c.cards || (card != nil && (card[1] != "") != c.warn) {
			t.Errorf("upkeep %+v: oldest transaction card %q, want shown %v, warn %v", c.upkeep, card, c.cards, c.warn)
		}
		var st struct {
			Backlog struct {
				Upkeep *UpkeepJSON `json:"upkeep"`
			} `json:"backlog"`
		}
		if err := json.Unmarshal([]byte(state), &st); err != nil {
			t.Fatal(err)
		}
		if (st.Backlog.Upkeep != nil) != c.json || c.json && (st.Backlog.Upkeep.DeadRowVersions != c.upkeep.DeadRows ||
			st.Backlog.Upkeep.OldestTransactionSec != c.upkeep.OldestTransactionAge.Seconds()) {
			t.Errorf("upkeep %+v: api/state upkeep %+v", c.upkeep, st.Backlog.Upkeep)
		}
	}
}

// A relay's Publisher (how it publishes: the Kafka producer's mode and
// transactional id) shows beside its name, escaped, and in api/state.
func TestRelayPublisherShown(t *testing.T) {
	h, err := New(Config{Relays: []RelayRef{
		{Name: "relay", Publisher: "Kafka, transactional id <orders>-1", Current: func() *relay.Relay { return nil }},
		{Name: "plain", Current: func() *relay.Relay { return nil }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "127.0.0.1"
	h.ServeHTTP(rec, req)
	page := rec.Body.String()
	if !strings.Contains(page, `<span class="note publisher">Kafka, transactional id &lt;orders&gt;-1</span>`) || strings.Count(page, `class="note publisher"`) != 1 {
		t.Errorf("the relay panel does not show the publisher once, escaped:\n%s", page)
	}
	rec = httptest.NewRecorder()
	req = httptest.NewRequest("GET", "/api/state", nil)
	req.Host = "127.0.0.1"
	h.ServeHTTP(rec, req)
	var st State
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Relays) != 2 || st.Relays[0].Publisher != "Kafka, transactional id <orders>-1" || st.Relays[1].Publisher != "" {
		t.Errorf("api/state relays: %v %s", err, rec.Body.String())
	}
}
