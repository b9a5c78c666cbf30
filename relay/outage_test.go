package relay

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A run of failed rounds, one a second for ten minutes, is logged as one
// warning when it starts, a reminder a minute, and one info line when a
// round succeeds; every other failure is at debug level. A second run
// starts with a warning of its own.
func TestOutageLogsStartRemindersAndEnd(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var o outage
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const rounds = 600
	for i := range rounds {
		o.failed(log, errors.New("down"), time.Second, false, start.Add(time.Duration(i)*time.Second))
		o.probeFailed(log, errors.New("still down"))
	}
	o.ended(log, resumedByProbe, start.Add(rounds*time.Second))
	o.ended(log, resumedByProbe, start.Add(rounds*time.Second)) // no outage: nothing
	o.failed(log, errors.New("down again"), time.Second, true, start.Add(rounds*time.Second+time.Hour))

	count := func(level, msg string) int {
		n := 0
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "level="+level) && strings.Contains(l, msg) {
				n++
			}
		}
		return n
	}
	if n := count("WARN", "rounds are failing"); n != 2 {
		t.Errorf("%d start warnings, want 2 (one per run)", n)
	}
	if n := count("WARN", "rounds are still failing"); n != 9 {
		t.Errorf("%d reminders over 10 minutes, want 9 (one a minute after the start)", n)
	}
	if n := count("INFO", `rounds succeed again" after=10m0s rounds_failed=600 probes_failed=600 resumed_by=probe`); n != 1 {
		t.Errorf("%d end lines with the run's figures, want 1:\n%s", n, buf.String())
	}
	if n := count("DEBUG", "txbox relay: round failed"); n != rounds-1-9 {
		t.Errorf("%d debug lines of failed rounds, want %d", n, rounds-1-9)
	}
	if n := count("WARN", "broker_connected=false"); n != 1 {
		t.Errorf("the broker's state is not in the second run's start line")
	}
}

// A lane keeper's heartbeats say their own failures in the same few lines,
// with their own words.
func TestOutageOfHeartbeats(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o := outage{texts: &beatTexts}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 120 {
		o.failed(log, errors.New("down"), 0, false, start.Add(time.Duration(i)*500*time.Millisecond))
	}
	o.ended(log, "", start.Add(time.Minute))
	want := []string{
		`level=WARN msg="txbox relay: lane lease heartbeats are failing; other relays take the lanes whose lease runs out meanwhile" err=down`,
		`level=INFO msg="txbox relay: lane lease heartbeats succeed again" after=1m0s beats_failed=120`,
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		if !strings.HasSuffix(l, want[i]) {
			t.Errorf("line %d: %s\nwant it to end with %s", i, l, want[i])
		}
	}
}
