package crash_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// tally adds up the scenarios of one TestCrash: the SIGKILLs of all, and
// the wall time from the start of the build to the end of the last ledger,
// the figures of the bound CI holds the harness to (at least 50 kills in
// about 3 minutes).
type tally struct {
	mu        sync.Mutex
	start     time.Time
	built     time.Duration // the build's part of the wall time
	scenarios int
	kills     int
}

func (ta *tally) add(kills int) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.scenarios++
	ta.kills += kills
}

// report logs the totals and appends them to the report file, if any.
func (ta *tally) report(t *testing.T, file string) {
	ta.mu.Lock()
	wall := time.Since(ta.start)
	line := fmt.Sprintf("crash total: %d scenarios ended, %d SIGKILLs in all, %s wall: the build %s, then the scenarios side by side %s",
		ta.scenarios, ta.kills, wall.Round(time.Second), ta.built.Round(time.Second), (wall - ta.built).Round(time.Second))
	ta.mu.Unlock()
	t.Log(line)
	appendReport(file, line)
}

// appendReport appends text and a newline to file; "" appends nowhere.
func appendReport(file, text string) {
	if file == "" {
		return
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	_, _ = f.WriteString(text + "\n")
	_ = f.Close()
}
